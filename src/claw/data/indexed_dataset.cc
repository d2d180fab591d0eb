#include "claw/data/indexed_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <limits>

namespace claw::data {
namespace {

// The format is little-endian; claw reads and writes it with native loads
// and stores.
static_assert(std::endian::native == std::endian::little, "indexed datasets assume a little-endian host");

// Calls fn(T{}) with T the C++ type of an integer dtype.
template <typename F>
void visit_integer(IndexDType t, F&& fn) {
  switch (t) {
    case IndexDType::u8: return fn(uint8_t{});
    case IndexDType::i8: return fn(int8_t{});
    case IndexDType::i16: return fn(int16_t{});
    case IndexDType::i32: return fn(int32_t{});
    case IndexDType::i64: return fn(int64_t{});
    case IndexDType::u16: return fn(uint16_t{});
    case IndexDType::f32:
    case IndexDType::f64: break;
  }
  CLAW_CHECK(false, "dtype {} is not an integer type", index_dtype_name(t));
}

bool valid_dtype_code(uint8_t code) { return code >= 1 && code <= 8; }

}  // namespace

size_t index_dtype_size(IndexDType t) {
  switch (t) {
    case IndexDType::u8: case IndexDType::i8: return 1;
    case IndexDType::i16: case IndexDType::u16: return 2;
    case IndexDType::i32: case IndexDType::f32: return 4;
    case IndexDType::i64: case IndexDType::f64: return 8;
  }
  return 0;
}

std::string_view index_dtype_name(IndexDType t) {
  switch (t) {
    case IndexDType::u8: return "u8";
    case IndexDType::i8: return "i8";
    case IndexDType::i16: return "i16";
    case IndexDType::i32: return "i32";
    case IndexDType::i64: return "i64";
    case IndexDType::f64: return "f64";
    case IndexDType::f32: return "f32";
    case IndexDType::u16: return "u16";
  }
  return "?";
}

bool index_dtype_is_integer(IndexDType t) { return t != IndexDType::f32 && t != IndexDType::f64; }

// ---------------------------------------------------------------- reader

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix),
      idx_(idx_path(prefix), "indexed dataset index file"),
      bin_(bin_path(prefix), "indexed dataset data file") {
  validate_header();
  validate_documents();
  validate_sequences();
}

void IndexedDataset::validate_header() {
  const std::string& f = idx_.path();
  const size_t size = idx_.size();
  if (size < kHeaderBytes)
    fail("{}: truncated index: {} bytes, but the header alone is {} bytes", f, size, kHeaderBytes);
  if (std::memcmp(idx_.bytes().data(), kMagic, sizeof(kMagic)) != 0)
    fail("{}: not a Megatron indexed-dataset index (bad magic; expected \"MMIDIDX\\0\\0\")", f);
  uint64_t version = read_idx<uint64_t>(9);
  if (version != kVersion) fail("{}: index version {}, but only version {} exists", f, version, kVersion);
  uint8_t code = read_idx<uint8_t>(17);
  if (!valid_dtype_code(code))
    fail("{}: unknown dtype code {}; valid codes are 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16", f, code);
  dtype_ = static_cast<IndexDType>(code);

  uint64_t seqs = read_idx<uint64_t>(18), docs = read_idx<uint64_t>(26);
  // Bound the counts by the file size before multiplying, so a corrupt
  // count cannot overflow the size formula.
  const uint64_t body = size - kHeaderBytes;
  uint64_t expected = 0;
  bool fits = seqs <= body / 12 && docs <= body / 8;
  if (fits) {
    expected = kHeaderBytes + 12 * seqs + 8 * docs;
    fits = expected <= size;
  }
  if (!fits)
    fail("{}: truncated index: {} bytes, too short for the {} sequences and {} document indices its header declares",
         f, size, seqs, docs);
  if (expected != size)
    fail("{}: {} bytes, but {} sequences and {} document indices take {}; the file has trailing bytes", f, size,
         seqs, docs, expected);
  num_sequences_ = static_cast<int64_t>(seqs);
  num_doc_entries_ = static_cast<int64_t>(docs);
  lengths_offset_ = kHeaderBytes;
  pointers_offset_ = lengths_offset_ + 4 * seqs;
  documents_offset_ = pointers_offset_ + 8 * seqs;
}

void IndexedDataset::validate_documents() {
  const std::string& f = idx_.path();
  if (num_doc_entries_ < 1) fail("{}: no document indices; a valid index has at least the leading 0", f);
  int64_t prev = read_idx<int64_t>(documents_offset_);
  if (prev != 0) fail("{}: document index 0 is {}, must be 0", f, prev);
  for (int64_t j = 1; j < num_doc_entries_; ++j) {
    int64_t v = read_idx<int64_t>(documents_offset_ + 8 * j);
    if (v < prev || v > num_sequences_)
      fail("{}: document index {} is {} after {}; document indices must rise from 0 to the sequence count {}", f, j, v,
           prev, num_sequences_);
    prev = v;
  }
  if (prev != num_sequences_)
    fail("{}: last document index is {}, must equal the sequence count {}", f, prev, num_sequences_);
}

void IndexedDataset::validate_sequences() {
  const int64_t item = static_cast<int64_t>(index_dtype_size(dtype_));
  const int64_t bin_size = static_cast<int64_t>(bin_.size());
  int64_t total = 0;
  for (int64_t i = 0; i < num_sequences_; ++i) {
    int64_t len = read_idx<int32_t>(lengths_offset_ + 4 * i);
    int64_t ptr = read_idx<int64_t>(pointers_offset_ + 8 * i);
    if (len < 0) fail("{}: sequence {} has negative length {}", idx_.path(), i, len);
    if (ptr < 0 || ptr % item != 0)
      fail("{}: sequence {} starts at byte {}, not a non-negative multiple of the {}-byte dtype {}", idx_.path(), i,
           ptr, item, index_dtype_name(dtype_));
    // ptr <= bin_size first, so ptr + len * item cannot overflow.
    if (ptr > bin_size || len > (bin_size - ptr) / item)
      fail("{}: {} bytes, shorter than its index {} implies: sequence {} needs bytes [{}, {})", bin_.path(), bin_size,
           idx_.path(), i, ptr, ptr + len * item);
    total += len;
  }
  total_tokens_ = total;
}

int64_t IndexedDataset::document_index(int64_t j) const {
  CLAW_CHECK(j >= 0 && j < num_doc_entries_, "document index {} of {}", j, num_doc_entries_);
  return read_idx<int64_t>(documents_offset_ + 8 * static_cast<size_t>(j));
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  CLAW_CHECK(i >= 0 && i < num_sequences_, "sequence {} of {}", i, num_sequences_);
  return read_idx<int32_t>(lengths_offset_ + 4 * static_cast<size_t>(i));
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  CLAW_CHECK(i >= 0 && i < num_sequences_, "sequence {} of {}", i, num_sequences_);
  return read_idx<int64_t>(pointers_offset_ + 8 * static_cast<size_t>(i));
}

void IndexedDataset::read_tokens(int64_t i, int64_t offset, int64_t count, int32_t* out) const {
  CLAW_CHECK(offset >= 0 && count >= 0 && offset + count <= sequence_length(i), "tokens [{}, {}) of sequence {}",
             offset, offset + count, i);
  visit_integer(dtype_, [&](auto zero) {
    using T = decltype(zero);
    const T* p = sequence<T>(i).data() + offset;
    for (int64_t k = 0; k < count; ++k) out[k] = static_cast<int32_t>(p[k]);
  });
}

TokenRange IndexedDataset::token_range(int64_t begin, int64_t end) const {
  CLAW_CHECK(begin >= 0 && begin <= end && end <= num_sequences_, "sequences [{}, {}) of {}", begin, end,
             num_sequences_);
  TokenRange r;
  visit_integer(dtype_, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = begin; i < end; ++i) {
      std::span<const T> s = sequence<T>(i);
      if (s.empty()) continue;
      // Plain loops over the mapped span vectorise; min/max are then
      // compared per sequence.
      T lo = s[0], hi = s[0];
      for (T v : s) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (r.min_sequence < 0 || lo < r.min) {
        r.min = lo;
        r.min_sequence = i;
      }
      if (r.max_sequence < 0 || hi > r.max) {
        r.max = hi;
        r.max_sequence = i;
      }
    }
  });
  return r;
}

// ---------------------------------------------------------------- builder

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string prefix, IndexDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), bin_(bin_path(prefix_)) {
  if (!index_dtype_is_integer(dtype_))
    fail("indexed dataset {}: dtype {} cannot hold token ids; use an integer dtype", prefix_,
         index_dtype_name(dtype_));
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens) {
  CLAW_CHECK(!finalized_, "{}: add_document after finalize", prefix_);
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("indexed dataset {}: document {} has {} tokens; the format's i32 lengths allow at most {}", prefix_,
         lengths_.size(), tokens.size(), std::numeric_limits<int32_t>::max());
  visit_integer(dtype_, [&](auto zero) {
    using T = decltype(zero);
    scratch_.resize(tokens.size() * sizeof(T));
    T* out = reinterpret_cast<T*>(scratch_.data());
    for (size_t k = 0; k < tokens.size(); ++k) {
      int32_t v = tokens[k];
      if (v < std::numeric_limits<T>::min() || static_cast<int64_t>(v) > std::numeric_limits<T>::max())
        fail("indexed dataset {}: token {} (position {} of document {}) does not fit dtype {} [{}, {}]", prefix_, v,
             k, lengths_.size(), index_dtype_name(dtype_), int64_t{std::numeric_limits<T>::min()},
             int64_t{std::numeric_limits<T>::max()});
      out[k] = static_cast<T>(v);
    }
  });
  bin_.write(scratch_.data(), scratch_.size());
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetBuilder::finalize() {
  CLAW_CHECK(!finalized_, "{}: finalize called twice", prefix_);
  bin_.close();

  const uint64_t seqs = lengths_.size(), docs = seqs + 1;
  const uint8_t code = static_cast<uint8_t>(dtype_);
  TempFileWriter idx(idx_path(prefix_));
  idx.write(IndexedDataset::kMagic, sizeof(IndexedDataset::kMagic));
  idx.write(&IndexedDataset::kVersion, 8);
  idx.write(&code, 1);
  idx.write(&seqs, 8);
  idx.write(&docs, 8);
  idx.write(lengths_.data(), lengths_.size() * sizeof(int32_t));
  const int64_t item = static_cast<int64_t>(index_dtype_size(dtype_));
  int64_t ptr = 0;
  for (int32_t len : lengths_) {
    idx.write(&ptr, 8);
    ptr += len * item;
  }
  for (int64_t d = 0; d <= static_cast<int64_t>(seqs); ++d) idx.write(&d, 8);
  idx.close();

  // Publish: drop any old .idx first so it can never pair with the new .bin,
  // then the .bin, then the new .idx (whose presence marks completion).
  if (::unlink(idx.path().c_str()) != 0 && errno != ENOENT)
    fail("indexed dataset {}: cannot remove the old {} ({})", prefix_, idx.path(), std::strerror(errno));
  bin_.commit();
  idx.commit();
  finalized_ = true;
}

}  // namespace claw::data
