// Megatron-Core's indexed dataset (megatron/core/datasets/indexed_dataset.py,
// "MMapIndexedDataset"), byte-compatible: files written here load in
// Megatron and files from Megatron's tools/preprocess_data.py load here.
//
// A dataset is a pair of files sharing a prefix:
//
//   <prefix>.bin  the tokens of every sequence, back to back, little-endian,
//                 in the index's dtype; nothing else.
//   <prefix>.idx  little-endian, no padding:
//     offset  size  field
//     0       9     magic "MMIDIDX\0\0"
//     9       8     u64 version = 1
//     17      1     u8 dtype code: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64,
//                   7 f32, 8 u16 (Megatron's DType enum)
//     18      8     u64 S = number of sequences
//     26      8     u64 D = number of document-index entries
//     34      4*S   i32 sequence lengths, in tokens
//     34+4S   8*S   i64 sequence pointers, byte offsets into .bin
//     34+12S  8*D   i64 document indices
//     total   34 + 12*S + 8*D bytes
//
// Document indices are sequence indices: document d is sequences
// [doc[d], doc[d+1]); doc[0] = 0 and doc[D-1] = S, so there are D-1
// documents (Megatron's builder starts the list with 0 and appends the
// sequence count after each document). preprocess_data.py writes one
// sequence per document unless it splits sentences, and a document with no
// sequences (two equal entries) for a text without tokens.
//
// Megatron's multimodal variant appends S i8 "sequence modes" after the
// document indices; claw reads text datasets only and names such an index
// in its error. (Layout checked against _IndexWriter, _IndexReader and
// IndexedDatasetBuilder in Megatron-Core's indexed_dataset.py; the
// pointers are running sums of length * itemsize, starting at 0.)
//
// Note the arrays start at offset 34, so the i32/i64 fields are unaligned;
// they are read with memcpy, never through a cast pointer.
//
// The reader maps both files and validates everything that later reads
// rely on, so sequence() never reads outside the mapping: header, dtype,
// .idx size = the formula above, document indices non-decreasing from 0 to
// S, lengths >= 0, pointers aligned to the dtype and inside .bin. Each
// failure is a claw::Error naming the file and what is wrong.
//
// Thread-safety: IndexedDataset is immutable after construction (reads of
// the mappings only) and safe to share between threads. The builder belongs
// to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "claw/core/error.h"
#include "claw/data/file_io.h"

namespace claw::data {

enum class IndexDType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

size_t index_dtype_size(IndexDType t);
std::string_view index_dtype_name(IndexDType t);
// Megatron's name for the dtype (its DType enum, numpy's names): "uint16".
std::string_view index_dtype_numpy_name(IndexDType t);
bool index_dtype_is_integer(IndexDType t);

template <typename T>
constexpr IndexDType index_dtype_of();
template <> constexpr IndexDType index_dtype_of<uint8_t>() { return IndexDType::u8; }
template <> constexpr IndexDType index_dtype_of<int8_t>() { return IndexDType::i8; }
template <> constexpr IndexDType index_dtype_of<int16_t>() { return IndexDType::i16; }
template <> constexpr IndexDType index_dtype_of<int32_t>() { return IndexDType::i32; }
template <> constexpr IndexDType index_dtype_of<int64_t>() { return IndexDType::i64; }
template <> constexpr IndexDType index_dtype_of<double>() { return IndexDType::f64; }
template <> constexpr IndexDType index_dtype_of<float>() { return IndexDType::f32; }
template <> constexpr IndexDType index_dtype_of<uint16_t>() { return IndexDType::u16; }

inline std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }
inline std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }

// Smallest and largest token of a sequence range, and the sequences where
// they first occur (for error messages).
struct TokenRange {
  int64_t min = 0, max = 0;
  int64_t min_sequence = -1, max_sequence = -1;  // -1 when the range has no tokens
};

class IndexedDataset {
 public:
  static constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
  static constexpr uint64_t kVersion = 1;
  static constexpr size_t kHeaderBytes = 34;

  // Opens <prefix>.idx and <prefix>.bin; see the header comment for checks.
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  const std::string& idx_file() const { return idx_.path(); }
  const std::string& bin_file() const { return bin_.path(); }
  IndexDType dtype() const { return dtype_; }

  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_doc_entries_ - 1; }
  int64_t total_tokens() const { return total_tokens_; }

  // Entry j in [0, num_documents()]: the first sequence of document j
  // (document_index(num_documents()) == num_sequences()).
  int64_t document_index(int64_t j) const;
  int32_t sequence_length(int64_t i) const;
  // Byte offset of sequence i in .bin.
  int64_t sequence_pointer(int64_t i) const;

  // Sequence i in its stored type; T must match dtype() (CLAW_CHECK).
  template <typename T>
  std::span<const T> sequence(int64_t i) const {
    CLAW_CHECK(index_dtype_of<T>() == dtype_, "{} holds {}", prefix_, index_dtype_name(dtype_));
    const std::byte* p = bin_.bytes().data() + sequence_pointer(i);
    return {reinterpret_cast<const T*>(p), static_cast<size_t>(sequence_length(i))};
  }

  // Copies tokens [offset, offset + count) of sequence i to out, converted
  // to int32 (integer dtypes; CLAW_CHECK on the bounds).
  void read_tokens(int64_t i, int64_t offset, int64_t count, int32_t* out) const;

  // Min and max token over sequences [begin, end) (integer dtypes).
  TokenRange token_range(int64_t begin, int64_t end) const;

 private:
  template <typename T>
  T read_idx(size_t offset) const {
    T v;
    std::memcpy(&v, idx_.bytes().data() + offset, sizeof(T));
    return v;
  }
  void validate_header();
  void validate_documents();
  void validate_sequences();

  std::string prefix_;
  MappedFile idx_, bin_;
  IndexDType dtype_ = IndexDType::u8;
  int64_t num_sequences_ = 0, num_doc_entries_ = 0, total_tokens_ = 0;
  size_t lengths_offset_ = 0, pointers_offset_ = 0, documents_offset_ = 0;
};

// Megatron's DType.optimal_dtype for token ids: u16 when the vocabulary has
// fewer than 65500 ids, else i32 (preprocess_data.py passes the tokenizer's
// vocab_size; the margin below 65536 is Megatron's choice, kept so claw
// writes the same bytes).
IndexDType optimal_index_dtype(int64_t vocab_size);

// Writes a dataset as Megatron's IndexedDatasetBuilder does: sequences are
// appended to the current document (add_sequence, Megatron's add_item) and
// end_document() closes it. preprocess_data.py writes one sequence per
// document (add_document), several when the JSON value is a list of
// sentences, and none for a document whose text has no tokens.
//
// Files. Tokens stream to a temporary .bin; sequence lengths and document
// boundaries stream to two more temporaries, so memory does not grow with
// the corpus. finish() writes the .idx to a temporary from them; publish()
// renames the .bin and then the .idx onto their names, so an .idx that
// exists always describes a complete .bin. A builder destroyed before
// publish() (an exception, a failed input) removes every file it created.
class IndexedDatasetBuilder {
 public:
  // dtype must be an integer type. Creates the temporaries next to the
  // prefix, so an unwritable directory fails here, before any work.
  IndexedDatasetBuilder(std::string prefix, IndexDType dtype);

  // Appends a sequence to the current document; claw::Error if a token does
  // not fit dtype.
  void add_sequence(std::span<const int32_t> tokens);
  // Ends the current document (which may have no sequences).
  void end_document();
  // A document of one sequence.
  void add_document(std::span<const int32_t> tokens) {
    add_sequence(tokens);
    end_document();
  }

  // Completes both files under their temporary names (all writes and
  // fsyncs); every document must be ended. A caller writing several
  // datasets finishes all of them before publishing any.
  void finish();
  // Renames the finished files onto <prefix>.bin and <prefix>.idx.
  void publish();
  void finalize() {
    finish();
    publish();
  }

  int64_t num_documents() const { return num_documents_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  enum class State { building, finished, published };

  std::string prefix_;
  IndexDType dtype_;
  TempFileWriter bin_;
  std::optional<TempFileWriter> lengths_;    // i32 per sequence
  std::optional<TempFileWriter> doc_ends_;   // i64 per document: its end sequence
  std::optional<TempFileWriter> idx_;
  std::vector<std::byte> scratch_;
  int64_t num_sequences_ = 0, num_documents_ = 0, num_tokens_ = 0;
  int64_t document_start_ = 0;  // first sequence of the current document
  State state_ = State::building;
};

}  // namespace claw::data
