#include "claw/model/tp_mappings.h"

#include <cstring>

#include "claw/core/error.h"

namespace claw::model {
namespace {

void copy(float* out, const float* in, int64_t n) {
  if (out != in && n > 0) std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
}

void all_reduce(comm::Group& g, float* out, const float* in, int64_t n) {
  copy(out, in, n);
  if (g.size() > 1) g.all_reduce(out, n, DType::f32);
}

// piece [rows, C] on every rank -> full [size*rows, C].
void all_gather_rows(comm::Group& g, float* full, const float* piece, int64_t piece_numel) {
  if (g.size() == 1) return copy(full, piece, piece_numel);
  float* slot = full + g.rank() * piece_numel;
  if (piece == slot) {
    g.all_gather(nullptr, full, piece_numel, DType::f32);
  } else if (piece == full) {  // out == in: move the piece to its slot (disjoint for rank > 0)
    std::memmove(slot, piece, static_cast<size_t>(piece_numel) * sizeof(float));
    g.all_gather(nullptr, full, piece_numel, DType::f32);
  } else {
    g.all_gather(piece, full, piece_numel, DType::f32);
  }
}

// full [size*rows, C] partial sums -> piece [rows, C] of the sum. piece == full
// is MPI's in-place form (the result lands at the front).
void reduce_scatter_rows(comm::Group& g, float* piece, const float* full, int64_t piece_numel) {
  if (g.size() == 1) return copy(piece, full, piece_numel);
  g.reduce_scatter(full, piece, piece_numel, DType::f32);
}

int64_t piece_numel(comm::Group& g, int64_t B, int64_t T, int64_t C) {
  CLAW_CHECK(B >= 0 && C >= 0, "sequence-parallel mapping on {}: B {} C {}", g.name(), B, C);
  return seq_shard(B, T, g.size(), g.rank()).rows * C;
}

}  // namespace

void check_sequence_split(int64_t T, int tp_size) {
  if (tp_size < 1) fail("--tensor-model-parallel-size {} must be at least 1", tp_size);
  if (T < 1 || T % tp_size != 0)
    fail("--seq-length {} is not a multiple of --tensor-model-parallel-size {}: sequence parallelism gives each "
         "tensor-parallel rank seq-length/TP consecutive positions; use a sequence length divisible by {} (or turn "
         "off --sequence-parallel)",
         T, tp_size, tp_size);
}

SeqShard seq_shard(int64_t B, int64_t T, int tp_size, int tp_rank) {
  check_sequence_split(T, tp_size);
  CLAW_CHECK(tp_rank >= 0 && tp_rank < tp_size, "tp rank {} of {}", tp_rank, tp_size);
  const int64_t rows = B * (T / tp_size);
  return {.rows = rows, .first = tp_rank * rows};
}

void copy_to_tp_forward(comm::Group&, float* out, const float* in, int64_t n) { copy(out, in, n); }
void copy_to_tp_backward(comm::Group& tp, float* din, const float* dout, int64_t n) { all_reduce(tp, din, dout, n); }
void reduce_from_tp_forward(comm::Group& tp, float* out, const float* in, int64_t n) { all_reduce(tp, out, in, n); }
void reduce_from_tp_backward(comm::Group&, float* din, const float* dout, int64_t n) { copy(din, dout, n); }

void scatter_to_sp_forward(comm::Group& tp, float* out, const float* in, int64_t B, int64_t T, int64_t C) {
  const int64_t n = piece_numel(tp, B, T, C);
  const float* mine = in + tp.rank() * n;
  // memmove: out == in leaves the piece at the front, overlapping its source.
  if (mine != out && n > 0) std::memmove(out, mine, static_cast<size_t>(n) * sizeof(float));
}

void scatter_to_sp_backward(comm::Group& tp, float* din, const float* dout, int64_t B, int64_t T, int64_t C) {
  all_gather_rows(tp, din, dout, piece_numel(tp, B, T, C));
}

void gather_from_sp_forward(comm::Group& tp, float* out, const float* in, int64_t B, int64_t T, int64_t C) {
  all_gather_rows(tp, out, in, piece_numel(tp, B, T, C));
}

void gather_from_sp_backward(comm::Group& tp, float* din, const float* dout, int64_t B, int64_t T, int64_t C) {
  reduce_scatter_rows(tp, din, dout, piece_numel(tp, B, T, C));
}

void reduce_scatter_to_sp_forward(comm::Group& tp, float* out, const float* in, int64_t B, int64_t T, int64_t C) {
  reduce_scatter_rows(tp, out, in, piece_numel(tp, B, T, C));
}

void reduce_scatter_to_sp_backward(comm::Group& tp, float* din, const float* dout, int64_t B, int64_t T,
                                   int64_t C) {
  all_gather_rows(tp, din, dout, piece_numel(tp, B, T, C));
}

}  // namespace claw::model
