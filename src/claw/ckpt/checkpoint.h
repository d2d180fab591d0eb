// Saving and loading distributed checkpoints (format.h, docs/checkpoints.md).
//
// Save, on every rank at once (Saver::save is collective):
//   1. rank 0 makes ROOT/iter_N.partial; all ranks lay out their file: the
//      shards they write (shards.h), cut into chunks, back to back;
//   2. a background thread copies the chunks into a host buffer (the
//      snapshot), checksums them, writes rank_R.bin and fsyncs it. The
//      caller must not change the values before wait_snapshot() returns:
//      the trainer calls it just before the next optimizer update, so the
//      copy runs alongside the next step's forward and backward;
//   3. poll() (collective, once per step) finds out whether every rank's file
//      is durable; when it is, rank 0 gathers the chunk lists, writes
//      metadata.json (temporary name, fsync, rename), renames iter_N.partial
//      to iter_N, fsyncs ROOT, then points latest_checkpointed_iteration.txt
//      at N and removes checkpoints beyond the last K.
// A writer killed anywhere before the rename leaves only a .partial
// directory, which nothing reads. Without --async-save, save() runs all
// three before returning.
//
// Load: every rank reads, for each of its shards, only the chunks that
// intersect it and only the checksum blocks covering the bytes it needs, so
// a checkpoint written at one TP x PP x DP x ZeRO layout loads at any other.
#pragma once

#include <condition_variable>
#include <cstdlib>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/ckpt/format.h"
#include "claw/ckpt/shards.h"
#include "claw/comm/group.h"
#include "claw/core/fault_injector.h"

namespace claw::ckpt {

struct SaveConfig {
  std::string root;    // --save
  bool async = false;  // --async-save
  int keep_last = 0;   // --keep-last-checkpoints (0: keep all)
  std::shared_ptr<const FaultInjector> faults;  // tests only: crash-in-save (null: none)
  // A save that fails (a full disk, an I/O error on any rank) removes its
  // partial files and is logged; training goes on and the next save tries
  // again. This many failures in a row end the job.
  int max_consecutive_failures = 3;
};

// What a checkpoint records besides its tensors (Metadata's free-form sections).
struct SaveInfo {
  int64_t iteration = 0;
  nlohmann::json model, args, state;
};

// A saver checks its directory when it is made, before any training: every
// rank creates it if needed and writes and removes a probe file there (a
// read-only or missing mount fails now, not at the first save), and rank 0
// takes an exclusive lock on DIR/.claw_save.lock, held until the saver goes
// (the kernel drops it when the process dies), so a second job given the
// same --save is refused, naming the job that holds it.
class Saver {
 public:
  Saver(comm::Group& world, SaveConfig cfg);
  ~Saver();
  Saver(const Saver&) = delete;
  Saver& operator=(const Saver&) = delete;

  // Collective. Starts saving the current contents of `shards` (waiting first
  // for a previous save to finish). Synchronous saves are committed on return.
  void save(const std::vector<Shard>& shards, SaveInfo info);
  // Optional, once before the first save: allocates the snapshot buffer for
  // `shards` and faults its pages in on a background thread. Returns its bytes.
  uint64_t prepare(const std::vector<Shard>& shards);
  // Returns once the pending save's snapshot no longer reads the shards.
  void wait_snapshot();
  // Collective: commits the pending save if every rank's file is durable.
  // Returns the iteration committed, if one was.
  std::optional<int64_t> poll();
  // Collective: waits for the pending save and commits it.
  void finish();
  bool pending() const { return pending_; }

  // Seconds the caller spent blocked in save(), wait_snapshot(), poll() and
  // finish() over the last save (the figure bench/bench_ckpt reports),
  // and the background thread's snapshot and write times.
  struct Timing {
    double blocked_s = 0, snapshot_s = 0, write_s = 0, commit_s = 0;
    uint64_t bytes = 0;  // this rank's file
  };
  Timing last_timing() const;
  // The iteration and timing of a save committed since the last call, if any.
  std::optional<std::pair<int64_t, Timing>> take_committed();
  // The iteration and reason of a save that failed since the last call, if any.
  std::optional<std::pair<int64_t, std::string>> take_failed();

 private:
  int lock_fd_ = -1;  // rank 0: DIR/.claw_save.lock, flock'ed while the saver lives
  int failures_ = 0;  // consecutive failed saves
  std::optional<std::pair<int64_t, std::string>> failed_;
  enum class Phase { idle, snapshot, writing, durable, failed };
  struct Piece {
    const void* src;
    ChunkMeta chunk;
  };
  uint64_t layout(const std::vector<Shard>& shards, std::vector<Piece>* pieces);
  void ensure_buffer(uint64_t file_bytes);
  void run_background(std::vector<Piece> pieces, std::string path);
  void wait_phase_at_least(Phase p);
  void add_blocked(double seconds);
  void commit();

  comm::Group& world_;
  SaveConfig cfg_;
  bool pending_ = false;
  SaveInfo info_;
  std::vector<ChunkMeta> chunks_;  // this rank's, with checksums once durable
  std::vector<TensorMeta> tensors_;
  // The snapshot, laid out as the file: page-aligned and never zero-filled
  // (the step must not pay for touching it), kept for the next save.
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeDeleter> buffer_;
  uint64_t buffer_capacity_ = 0, buffer_bytes_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::idle;
  std::string error_;
  Timing timing_;
  std::optional<std::pair<int64_t, Timing>> committed_;
};

// The directory --load reads: the iteration given (>= 0) or the latest
// complete one. Throws naming `what` (the flag or command), ROOT and what it
// holds when there is none.
std::string resolve_load_dir(const std::string& root, int64_t iteration = -1, const std::string& what = "--load");

// The checkpoint a run's `--load root` starts from: resolve_load_dir's
// choice, except that a directory holding no checkpoint yet gives nullopt
// (a run that saves there starts from iteration 0) and that with `fallback`
// (--load-fallback) a latest iteration without metadata.json gives way to
// the newest complete one before it (logged when `log_fallback`). The one
// rule for every loader, and for the commands that read the model a
// checkpoint records before loading it.
std::optional<std::string> find_checkpoint(const std::string& root, int64_t step, bool fallback,
                                           bool log_fallback = true);
// The newest complete iteration of `root` before `iteration`.
std::optional<int64_t> previous_complete_iteration(const std::string& root, int64_t iteration);

// Checks that the checkpoint holds every tensor in `shards` at the shape
// this model has (and, with `all_params`, no model tensor that the model
// lacks), naming the first mismatch.
void check_compatible(const Metadata& meta, const std::string& dir, const std::vector<Shard>& shards,
                      const std::vector<std::string>& all_params = {});
// Reads a checkpoint's tensors: its chunks indexed by tensor, each file
// opened once, only the checksum blocks covering the bytes asked for read
// (and verified). Throws naming the file and tensor on a short file or a
// checksum mismatch.
class CheckpointReader {
 public:
  CheckpointReader(std::string dir, const Metadata& meta);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  // Fills `shards`; elements the checkpoint shape does not cover
  // (vocabulary padding) are zeroed.
  void load(const std::vector<Shard>& shards);
  // One whole tensor as f32 whatever its stored dtype (export, inspect, tests).
  std::vector<float> tensor(const std::string& name);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  // Fills box `target` of `tensor` (dst: row-major over target, elements of
  // dst_dtype) from the chunks, converting from the stored dtype.
  void read_box(const std::string& tensor, const Box& target, void* dst, DType dst_dtype);
  // Bytes [lo, hi) of chunk c, rounded out to whole checksum blocks and
  // verified; returns a pointer to byte lo (valid until the next read).
  const uint8_t* read_bytes(const ChunkMeta& c, uint64_t lo, uint64_t hi);

  std::string dir_;
  const Metadata& meta_;
  std::map<std::string, std::vector<const ChunkMeta*>> chunks_;
  std::vector<int> fds_;
  std::vector<uint8_t> buf_;
  uint64_t bytes_read_ = 0;
};

// check_compatible, then a CheckpointReader's load. Returns the bytes read.
uint64_t load_shards(const std::string& dir, const Metadata& meta, const std::vector<Shard>& shards);

}  // namespace claw::ckpt
