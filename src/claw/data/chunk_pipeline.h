// A reader thread, worker threads and the caller, in input order: the
// engine of `claw preprocess` and `claw curate`. The reader cuts a
// JsonlReader's (or any Reader with JsonlReader::next) input into chunks of whole lines (chunk_bytes each); each
// worker turns a chunk into a Result with `work`; next() hands the results
// back in input order. At most 2 * workers + 1 chunks are in flight, so
// memory is bounded by the workers, not the input.
//
// Result must have a member `std::exception_ptr failure`: an exception from
// the reader or from `work` is stored there and delivered in input order,
// after every chunk read before it (the caller rethrows it). The destructor
// stops and joins every thread, so an exception on the caller's side never
// leaves threads running.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "claw/data/jsonl_reader.h"

namespace claw::data {

template <class Result, class Reader = JsonlReader>
class OrderedChunkPipeline {
 public:
  using Work = std::function<Result(const LineChunk&)>;

  OrderedChunkPipeline(Reader& reader, size_t chunk_bytes, int workers, Work work)
      : reader_(reader), chunk_bytes_(chunk_bytes), work_fn_(std::move(work)), max_in_flight_(2 * workers + 1) {
    try {
      threads_.emplace_back([this] { read_loop(); });
      for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work_loop(); });
    } catch (...) {  // no thread left running if starting one fails
      stop_and_join();
      throw;
    }
  }
  OrderedChunkPipeline(const OrderedChunkPipeline&) = delete;
  OrderedChunkPipeline& operator=(const OrderedChunkPipeline&) = delete;
  ~OrderedChunkPipeline() { stop_and_join(); }

  // The next chunk's result in input order; nullopt after the last.
  std::optional<Result> next() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_.contains(next_out_) || (input_done_ && next_out_ == num_chunks_); });
    auto it = done_.find(next_out_);
    if (it == done_.end()) return std::nullopt;
    Result r = std::move(it->second);
    done_.erase(it);
    ++next_out_;
    --in_flight_;
    lock.unlock();
    cv_.notify_all();
    return r;
  }

 private:
  void stop_and_join() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void read_loop() {
    try {
      while (true) {
        {
          std::unique_lock lock(mu_);
          cv_.wait(lock, [&] { return stop_ || in_flight_ < max_in_flight_; });
          if (stop_) return;
        }
        LineChunk chunk;
        const bool more = reader_.next(chunk, chunk_bytes_);
        std::lock_guard lock(mu_);
        if (!more) {
          input_done_ = true;
          break;
        }
        work_.push_back({num_chunks_++, std::move(chunk)});
        ++in_flight_;
        cv_.notify_all();
      }
    } catch (...) {
      // Delivered after every chunk read before it, like a bad line.
      std::lock_guard lock(mu_);
      done_[num_chunks_++].failure = std::current_exception();
      ++in_flight_;
      input_done_ = true;
    }
    cv_.notify_all();
  }

  void work_loop() {
    while (true) {
      std::pair<int64_t, LineChunk> item;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !work_.empty() || input_done_; });
        if (stop_ || work_.empty()) return;
        item = std::move(work_.front());
        work_.pop_front();
      }
      Result r;
      try {
        r = work_fn_(item.second);
      } catch (...) {
        r.failure = std::current_exception();
      }
      {
        std::lock_guard lock(mu_);
        done_[item.first] = std::move(r);
      }
      cv_.notify_all();
    }
  }

  Reader& reader_;
  const size_t chunk_bytes_;
  const Work work_fn_;
  // Chunks read and not yet handed to the caller: twice the workers, so a
  // worker stuck on a long document does not soon leave the others idle
  // (output order holds every later chunk until it is done).
  const int64_t max_in_flight_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, LineChunk>> work_;  // (chunk number, lines) awaiting a worker
  std::map<int64_t, Result> done_;                  // finished, awaiting their turn
  int64_t num_chunks_ = 0, next_out_ = 0, in_flight_ = 0;
  bool input_done_ = false, stop_ = false;
  std::vector<std::thread> threads_;  // last member: started after, joined before the state above goes
};

}  // namespace claw::data
