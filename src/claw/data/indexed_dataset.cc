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

std::string_view index_dtype_numpy_name(IndexDType t) {
  switch (t) {
    case IndexDType::u8: return "uint8";
    case IndexDType::i8: return "int8";
    case IndexDType::i16: return "int16";
    case IndexDType::i32: return "int32";
    case IndexDType::i64: return "int64";
    case IndexDType::f64: return "float64";
    case IndexDType::f32: return "float32";
    case IndexDType::u16: return "uint16";
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
  if (expected + seqs == size && seqs > 0)
    fail("{}: {} trailing bytes, one per sequence: a multimodal index (Megatron's sequence modes); claw reads "
         "text datasets only",
         f, seqs);
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

IndexDType optimal_index_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexDType::u16 : IndexDType::i32;
}

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string prefix, IndexDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), bin_(bin_path(prefix_)) {
  if (!index_dtype_is_integer(dtype_))
    fail("indexed dataset {}: dtype {} cannot hold token ids; use an integer dtype", prefix_,
         index_dtype_name(dtype_));
  lengths_.emplace(idx_path(prefix_) + ".lengths");
  doc_ends_.emplace(idx_path(prefix_) + ".documents");
}

void IndexedDatasetBuilder::add_sequence(std::span<const int32_t> tokens) {
  CLAW_CHECK(state_ == State::building, "{}: add_sequence after finish", prefix_);
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("indexed dataset {}: document {} has a sequence of {} tokens; the format's i32 lengths allow at most {}",
         prefix_, num_documents_, tokens.size(), std::numeric_limits<int32_t>::max());
  visit_integer(dtype_, [&](auto zero) {
    using T = decltype(zero);
    scratch_.resize(tokens.size() * sizeof(T));
    T* out = reinterpret_cast<T*>(scratch_.data());
    for (size_t k = 0; k < tokens.size(); ++k) {
      int32_t v = tokens[k];
      if (v < std::numeric_limits<T>::min() || static_cast<int64_t>(v) > std::numeric_limits<T>::max())
        fail("indexed dataset {}: token {} (position {} of document {}) does not fit dtype {} [{}, {}]", prefix_, v,
             k, num_documents_, index_dtype_name(dtype_), int64_t{std::numeric_limits<T>::min()},
             int64_t{std::numeric_limits<T>::max()});
      out[k] = static_cast<T>(v);
    }
  });
  bin_.write(scratch_.data(), scratch_.size());
  const int32_t length = static_cast<int32_t>(tokens.size());
  lengths_->write(&length, sizeof(length));
  ++num_sequences_;
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetBuilder::end_document() {
  CLAW_CHECK(state_ == State::building, "{}: end_document after finish", prefix_);
  doc_ends_->write(&num_sequences_, sizeof(num_sequences_));
  document_start_ = num_sequences_;
  ++num_documents_;
}

void IndexedDatasetBuilder::finish() {
  CLAW_CHECK(state_ == State::building, "{}: finish called twice", prefix_);
  CLAW_CHECK(document_start_ == num_sequences_, "{}: sequences {}..{} belong to no ended document", prefix_,
             document_start_, num_sequences_);
  bin_.close();
  lengths_->close();
  doc_ends_->close();
  const MappedFile lengths(lengths_->temp_path(), "indexed dataset builder's temporary");
  const MappedFile doc_ends(doc_ends_->temp_path(), "indexed dataset builder's temporary");
  CLAW_CHECK(lengths.size() == 4 * static_cast<size_t>(num_sequences_) &&
             doc_ends.size() == 8 * static_cast<size_t>(num_documents_));

  const uint64_t seqs = static_cast<uint64_t>(num_sequences_), entries = static_cast<uint64_t>(num_documents_) + 1;
  const uint8_t code = static_cast<uint8_t>(dtype_);
  TempFileWriter& idx = idx_.emplace(idx_path(prefix_));
  idx.write(IndexedDataset::kMagic, sizeof(IndexedDataset::kMagic));
  idx.write(&IndexedDataset::kVersion, 8);
  idx.write(&code, 1);
  idx.write(&seqs, 8);
  idx.write(&entries, 8);
  idx.write(lengths.bytes().data(), lengths.size());
  // Pointers are the running byte offsets, computed a block at a time from
  // the mapped lengths.
  const int64_t item = static_cast<int64_t>(index_dtype_size(dtype_));
  std::vector<int64_t> pointers;
  int64_t ptr = 0;
  for (size_t first = 0; first < seqs; first += pointers.size()) {
    pointers.resize(std::min<size_t>(seqs - first, size_t{1} << 16));
    for (size_t k = 0; k < pointers.size(); ++k) {
      int32_t len;
      std::memcpy(&len, lengths.bytes().data() + 4 * (first + k), 4);
      pointers[k] = ptr;
      ptr += len * item;
    }
    idx.write(pointers.data(), pointers.size() * sizeof(int64_t));
  }
  const int64_t leading_zero = 0;
  idx.write(&leading_zero, 8);
  idx.write(doc_ends.bytes().data(), doc_ends.size());
  idx.close();
  // The spill files are no longer needed; dropping them unlinks them.
  lengths_.reset();
  doc_ends_.reset();
  state_ = State::finished;
}

void IndexedDatasetBuilder::publish() {
  CLAW_CHECK(state_ == State::finished, "{}: publish needs finish first, once", prefix_);
  // Drop any old .idx first so it can never pair with the new .bin, then
  // the .bin, then the new .idx (whose presence marks completion).
  if (::unlink(idx_->path().c_str()) != 0 && errno != ENOENT)
    fail("indexed dataset {}: cannot remove the old {} ({})", prefix_, idx_->path(), std::strerror(errno));
  bin_.commit();
  idx_->commit();
  state_ = State::published;
}

}  // namespace claw::data
