// The distributed checkpoint format (docs/checkpoints.md).
//
// A checkpoint is a directory ROOT/iter_NNNNNNN holding
//   metadata.json     every tensor's global shape and dtype, every chunk
//                     (where each piece of each tensor lives), the resolved
//                     config and the training state
//   rank_RRRRR.bin    the chunks rank R wrote, back to back (64-byte aligned)
// and ROOT/latest_checkpointed_iteration.txt names the newest complete one.
//
// A chunk is a box of a tensor in global coordinates (offset and size per
// dimension), stored row-major within the box. Tensor parallelism gives
// boxes directly; a ZeRO shard, a contiguous run of a rank's flat buffer, is
// cut into at most 2 x ndim - 1 boxes (flat_range_boxes). A reader needing
// any region intersects it with the chunks, so a checkpoint written at one
// layout reads at any other. Each chunk carries one xxh3-64 checksum per
// `checksum_block` bytes, so a reader that needs part of a chunk verifies
// exactly the blocks it reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/core/dtype.h"

namespace claw::ckpt {

// A JSON file (a checkpoint's metadata, a model's config, an adapter's
// config): its text parsed, refused when it nests deeper than
// core/json_depth.h allows; errors name the file and what it is.
nlohmann::json read_json_file(const std::string& path, const std::string& what);
// The same for a JSON text held in memory (a safetensors header).
nlohmann::json parse_json_text(std::string_view text, const std::string& path, const std::string& what);

constexpr int kFormatVersion = 1;
constexpr uint64_t kChecksumBlock = uint64_t{1} << 20;

struct Box {
  std::vector<int64_t> offset, size;
  int64_t numel() const;
  int ndim() const { return static_cast<int>(size.size()); }
};

// Elements [begin, begin + n) of a row-major tensor of `shape` as boxes, in
// order (at most 2 x ndim - 1 of them).
std::vector<Box> flat_range_boxes(const std::vector<int64_t>& shape, int64_t begin, int64_t n);
// The common part of two boxes of the same tensor, if any.
std::optional<Box> intersect(const Box& a, const Box& b);
// Row-major index of `point` (absolute coordinates) within `box`.
int64_t index_in(const Box& box, const std::vector<int64_t>& point);

struct TensorMeta {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
};

struct ChunkMeta {
  std::string tensor;
  Box box;
  int file = 0;         // index into Metadata::files
  uint64_t offset = 0;  // bytes into the file
  uint64_t length = 0;  // bytes: box.numel() x dtype size
  std::vector<uint64_t> checksums;  // xxh3-64 of each checksum_block bytes of the chunk (the last may be short)
};

struct Metadata {
  int version = kFormatVersion;
  int64_t iteration = 0;
  uint64_t checksum_block = kChecksumBlock;
  std::vector<std::string> files;
  std::vector<TensorMeta> tensors;
  std::vector<ChunkMeta> chunks;
  // Free-form sections: "model" (ModelConfig fields), "args" (the resolved
  // flags), "state" (consumed samples, optimizer step, seed, the layout it
  // was saved at).
  nlohmann::json model, args, state;

  const TensorMeta* find(const std::string& tensor) const;
  nlohmann::json to_json() const;
  // Checks every field's type and range (and the "state" section's known
  // fields: consumed samples, seed, layout, ...); throws claw::Error naming
  // `path` and the field's JSON path ("state.layout.dp") when one is missing
  // or malformed, so readers of the sections meet only valid values.
  static Metadata from_json(const nlohmann::json& j, const std::string& path);
  static Metadata read(const std::string& dir);  // dir/metadata.json
};

nlohmann::json chunk_to_json(const ChunkMeta& c);
// `at`: the chunk's JSON path in `path`, for errors ("chunks[3]").
ChunkMeta chunk_from_json(const nlohmann::json& j, const std::string& path, const std::string& at = "chunk");

// Names in a checkpoint root.
std::string iteration_dir(const std::string& root, int64_t iteration);  // root/iter_0000020
std::string latest_file(const std::string& root);  // root/latest_checkpointed_iteration.txt
std::string rank_file_name(int rank);               // rank_00003.bin
// The iteration the latest pointer names, if any (throws if it is malformed).
std::optional<int64_t> read_latest(const std::string& root);
// Iterations with a complete directory (renamed into place: metadata.json present), ascending.
std::vector<int64_t> complete_iterations(const std::string& root);

// Durable small writes: write to path.tmp, fsync, rename, fsync the directory.
void write_file_atomic(const std::string& path, const std::string& text);
void fsync_dir(const std::string& dir);

uint64_t checksum(const void* data, size_t n);

// "[50257, 768]" (error messages).
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace claw::ckpt
