// Megatron indexed dataset: the byte layout pinned by hand, round trips, and
// one test per kind of bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "claw/core/philox.h"
#include "claw/data/file_io.h"
#include "claw/data/indexed_dataset.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

using claw::testing::TempDir;

std::string bytes_of(const std::string& path) { return read_file(path, "test file"); }

// Three documents [1 2 3] [7] [65535 0] as u16, laid out by hand from the
// format description (Megatron-Core indexed_dataset.py, _IndexWriter).
const unsigned char kTinyIdx[] = {
    'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,  // magic
    1, 0, 0, 0, 0, 0, 0, 0,                   // u64 version
    8,                                        // u8 dtype code: u16
    3, 0, 0, 0, 0, 0, 0, 0,                   // u64 sequence count
    4, 0, 0, 0, 0, 0, 0, 0,                   // u64 document-index count (documents + 1)
    3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0,       // i32 lengths
    0, 0, 0, 0, 0, 0, 0, 0,                   // i64 pointers: bytes 0,
    6, 0, 0, 0, 0, 0, 0, 0,                   //   6 (after 3 u16 tokens),
    8, 0, 0, 0, 0, 0, 0, 0,                   //   8
    0, 0, 0, 0, 0, 0, 0, 0,                   // i64 document indices 0,
    1, 0, 0, 0, 0, 0, 0, 0,                   //   1,
    2, 0, 0, 0, 0, 0, 0, 0,                   //   2,
    3, 0, 0, 0, 0, 0, 0, 0,                   //   3
};
const unsigned char kTinyBin[] = {1, 0, 2, 0, 3, 0, 7, 0, 0xff, 0xff, 0, 0};

std::string as_string(const unsigned char* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

void write_tiny(const std::string& prefix) {
  IndexedDatasetBuilder b(prefix, IndexDType::u16);
  b.add_document(std::vector<int32_t>{1, 2, 3});
  b.add_document(std::vector<int32_t>{7});
  b.add_document(std::vector<int32_t>{65535, 0});
  b.finalize();
}

TEST(IndexedDataset, BuilderWritesTheMegatronLayout) {
  TempDir dir;
  const std::string prefix = dir / "tiny";
  write_tiny(prefix);
  EXPECT_EQ(sizeof(kTinyIdx), 34u + 12 * 3 + 8 * 4);
  EXPECT_EQ(bytes_of(prefix + ".idx"), as_string(kTinyIdx, sizeof(kTinyIdx)));
  EXPECT_EQ(bytes_of(prefix + ".bin"), as_string(kTinyBin, sizeof(kTinyBin)));
  // Nothing but the two published files is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2);
}

TEST(IndexedDataset, ReadsAHandWrittenIndex) {
  TempDir dir;
  dir.write("tiny.idx", as_string(kTinyIdx, sizeof(kTinyIdx)));
  dir.write("tiny.bin", as_string(kTinyBin, sizeof(kTinyBin)));
  IndexedDataset d(dir / "tiny");
  EXPECT_EQ(d.dtype(), IndexDType::u16);
  EXPECT_EQ(d.num_sequences(), 3);
  EXPECT_EQ(d.num_documents(), 3);
  EXPECT_EQ(d.total_tokens(), 6);
  EXPECT_EQ(d.sequence_length(2), 2);
  EXPECT_EQ(d.sequence_pointer(2), 8);
  EXPECT_EQ(d.document_index(3), 3);
  auto s0 = d.sequence<uint16_t>(0);
  EXPECT_EQ(std::vector<uint16_t>(s0.begin(), s0.end()), (std::vector<uint16_t>{1, 2, 3}));
  auto s2 = d.sequence<uint16_t>(2);
  EXPECT_EQ(std::vector<uint16_t>(s2.begin(), s2.end()), (std::vector<uint16_t>{65535, 0}));
  int32_t out[2];
  d.read_tokens(0, 1, 2, out);
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[1], 3);
  TokenRange r = d.token_range(0, 3);
  EXPECT_EQ(r.min, 0);
  EXPECT_EQ(r.max, 65535);
  EXPECT_EQ(r.max_sequence, 2);
  EXPECT_EQ(d.token_range(1, 2).max, 7);
}

TEST(IndexedDataset, DocumentsOfSeveralSequences) {
  // preprocess_data.py --split-sentences writes several sequences per
  // document: document indices [0, 2, 3] make documents {0, 1} and {2}.
  std::string idx = as_string(kTinyIdx, sizeof(kTinyIdx));
  const uint64_t docs = 3;
  std::memcpy(idx.data() + 26, &docs, 8);
  const int64_t entries[3] = {0, 2, 3};
  idx.resize(34 + 12 * 3);
  idx.append(reinterpret_cast<const char*>(entries), sizeof(entries));
  TempDir dir;
  dir.write("s.idx", idx);
  dir.write("s.bin", as_string(kTinyBin, sizeof(kTinyBin)));
  IndexedDataset d(dir / "s");
  EXPECT_EQ(d.num_sequences(), 3);
  EXPECT_EQ(d.num_documents(), 2);
  EXPECT_EQ(d.document_index(1), 2);
}

template <typename T>
void round_trip(IndexDType dtype, int32_t lo, int32_t hi) {
  TempDir dir;
  const std::string prefix = dir / "rt";
  RandomStream rng(7, hash_name("indexed_dataset_test"));
  std::vector<std::vector<int32_t>> docs;
  uint64_t k = 0;
  for (int d = 0; d < 50; ++d) {
    std::vector<int32_t> doc(rng.block(k++)[0] % 300);  // some empty
    const uint64_t span = static_cast<uint64_t>(int64_t{hi} - lo + 1);
    for (int32_t& t : doc) t = static_cast<int32_t>(lo + static_cast<int64_t>(rng.block(k++)[0] % span));
    docs.push_back(doc);
  }
  docs[3].clear();
  docs[4] = {lo, hi};
  IndexedDatasetBuilder b(prefix, dtype);
  int64_t total = 0;
  for (const auto& doc : docs) {
    b.add_document(doc);
    total += static_cast<int64_t>(doc.size());
  }
  EXPECT_EQ(b.num_documents(), 50);
  EXPECT_EQ(b.num_tokens(), total);
  b.finalize();

  IndexedDataset d(prefix);
  EXPECT_EQ(d.dtype(), dtype);
  EXPECT_EQ(d.num_sequences(), 50);
  EXPECT_EQ(d.num_documents(), 50);
  EXPECT_EQ(d.total_tokens(), total);
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(d.document_index(i), i);
    auto s = d.sequence<T>(i);
    ASSERT_EQ(s.size(), docs[i].size());
    for (size_t j = 0; j < s.size(); ++j) ASSERT_EQ(static_cast<int32_t>(s[j]), docs[i][j]);
    std::vector<int32_t> converted(s.size());
    d.read_tokens(i, 0, static_cast<int64_t>(s.size()), converted.data());
    EXPECT_EQ(converted, docs[i]);
  }
  TokenRange r = d.token_range(0, 50);
  EXPECT_EQ(r.min, lo);
  EXPECT_EQ(r.max, hi);
}

TEST(IndexedDataset, RoundTripU16) { round_trip<uint16_t>(IndexDType::u16, 0, 65535); }
TEST(IndexedDataset, RoundTripI32) { round_trip<int32_t>(IndexDType::i32, -2000000000, 2000000000); }
TEST(IndexedDataset, RoundTripU8AndI64) {
  round_trip<uint8_t>(IndexDType::u8, 0, 255);
  round_trip<int64_t>(IndexDType::i64, -5, 100000);
}

TEST(IndexedDataset, RebuildReplacesTheOldFiles) {
  TempDir dir;
  const std::string prefix = dir / "re";
  write_tiny(prefix);
  IndexedDatasetBuilder b(prefix, IndexDType::i32);
  b.add_document(std::vector<int32_t>{42, 43});
  b.finalize();
  IndexedDataset d(prefix);
  EXPECT_EQ(d.dtype(), IndexDType::i32);
  EXPECT_EQ(d.total_tokens(), 2);
  EXPECT_EQ(d.sequence<int32_t>(0)[1], 43);
}

TEST(IndexedDataset, UnfinishedBuilderLeavesNoFiles) {
  TempDir dir;
  {
    IndexedDatasetBuilder b(dir / "partial", IndexDType::u16);
    b.add_document(std::vector<int32_t>{1, 2, 3});
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 0);
}

TEST(IndexedDataset, BuilderRejectsTokensOutsideTheDtype) {
  TempDir dir;
  IndexedDatasetBuilder b(dir / "x", IndexDType::u16);
  b.add_document(std::vector<int32_t>{1, 2});
  EXPECT_CLAW_ERROR(b.add_document(std::vector<int32_t>{5, 65536}), dir / "x", "65536", "document 1", "u16",
                    "[0, 65535]");
  EXPECT_CLAW_ERROR(b.add_document(std::vector<int32_t>{-1}), "-1", "u16");
  EXPECT_CLAW_ERROR(IndexedDatasetBuilder(dir / "f", IndexDType::f32), "f32", "integer dtype");
}

TEST(IndexedDataset, BuilderWritesDocumentsOfSeveralOrNoSequences) {
  // Megatron's builder: add_item per sequence, end_document per document.
  // Documents {[1 2 3] [7]}, {}, {[65535 0]}: document indices 0 2 2 3.
  TempDir dir;
  const std::string prefix = dir / "multi";
  IndexedDatasetBuilder b(prefix, IndexDType::u16);
  b.add_sequence(std::vector<int32_t>{1, 2, 3});
  b.add_sequence(std::vector<int32_t>{7});
  b.end_document();
  b.end_document();
  b.add_document(std::vector<int32_t>{65535, 0});
  EXPECT_EQ(b.num_documents(), 3);
  EXPECT_EQ(b.num_sequences(), 3);
  EXPECT_EQ(b.num_tokens(), 6);
  b.finalize();
  std::string idx = as_string(kTinyIdx, sizeof(kTinyIdx));
  const int64_t entries[4] = {0, 2, 2, 3};
  std::memcpy(idx.data() + 34 + 12 * 3, entries, sizeof(entries));
  EXPECT_EQ(bytes_of(prefix + ".idx"), idx);
  EXPECT_EQ(bytes_of(prefix + ".bin"), as_string(kTinyBin, sizeof(kTinyBin)));
  IndexedDataset d(prefix);
  EXPECT_EQ(d.num_documents(), 3);
  EXPECT_EQ(d.document_index(1), 2);
  EXPECT_EQ(d.document_index(2), 2);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2) << "spill files removed";
}

TEST(IndexedDataset, FinishedButUnpublishedLeavesNoFiles) {
  TempDir dir;
  write_tiny(dir / "old");
  const std::string old_idx = bytes_of(dir / "old.idx");
  {
    IndexedDatasetBuilder b(dir / "old", IndexDType::i32);
    b.add_document(std::vector<int32_t>{5});
    b.finish();  // e.g. a second output failed to finish: this one is never published
  }
  EXPECT_EQ(bytes_of(dir / "old.idx"), old_idx);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2);
}

TEST(IndexedDataset, OptimalDtypeIsMegatrons) {
  // DType.optimal_dtype: uint16 below 65500 ids, else int32.
  EXPECT_EQ(optimal_index_dtype(50257), IndexDType::u16);
  EXPECT_EQ(optimal_index_dtype(65499), IndexDType::u16);
  EXPECT_EQ(optimal_index_dtype(65500), IndexDType::i32);
  EXPECT_EQ(optimal_index_dtype(100277), IndexDType::i32);
  EXPECT_EQ(index_dtype_numpy_name(IndexDType::u16), "uint16");
  EXPECT_EQ(index_dtype_numpy_name(IndexDType::i32), "int32");
}

// A valid tiny dataset whose .idx (or .bin) a test then damages.
struct Damaged {
  TempDir dir;
  std::string prefix = dir / "bad";
  std::string idx = as_string(kTinyIdx, sizeof(kTinyIdx));
  std::string bin = as_string(kTinyBin, sizeof(kTinyBin));

  template <typename T>
  void set(size_t offset, T v) {
    std::memcpy(idx.data() + offset, &v, sizeof(T));
  }
  std::string idx_file() const { return prefix + ".idx"; }
  std::string bin_file() const { return prefix + ".bin"; }
  void open() {
    dir.write("bad.idx", idx);
    dir.write("bad.bin", bin);
    IndexedDataset d(prefix);
  }
};

TEST(IndexedDatasetErrors, MissingFilesNameThePathTried) {
  TempDir dir;
  EXPECT_CLAW_ERROR(IndexedDataset(dir / "none"), dir / "none.idx", "not found");
  dir.write("half.idx", as_string(kTinyIdx, sizeof(kTinyIdx)));
  EXPECT_CLAW_ERROR(IndexedDataset(dir / "half"), dir / "half.bin", "not found");
}

TEST(IndexedDatasetErrors, BadMagic) {
  Damaged d;
  d.idx[0] = 'X';
  EXPECT_CLAW_ERROR(d.open(), d.idx_file(), "bad magic");
}

TEST(IndexedDatasetErrors, BadVersion) {
  Damaged d;
  d.set<uint64_t>(9, 2);
  EXPECT_CLAW_ERROR(d.open(), d.idx_file(), "version 2", "version 1");
}

TEST(IndexedDatasetErrors, BadDtype) {
  for (uint8_t code : {uint8_t{0}, uint8_t{9}, uint8_t{255}}) {
    Damaged d;
    d.set<uint8_t>(17, code);
    EXPECT_CLAW_ERROR(d.open(), d.idx_file(), fmt::format("dtype code {}", code), "8 u16");
  }
}

TEST(IndexedDatasetErrors, TruncatedHeader) {
  Damaged d;
  d.idx.resize(20);
  EXPECT_CLAW_ERROR(d.open(), d.idx_file(), "truncated", "20 bytes", "34");
}

TEST(IndexedDatasetErrors, TruncatedArrays) {
  Damaged d;
  d.idx.resize(d.idx.size() - 8);
  EXPECT_CLAW_ERROR(d.open(), d.idx_file(), "truncated", "3 sequences", "4 document indices");
  Damaged huge;
  huge.set<uint64_t>(18, uint64_t{1} << 62);  // would overflow 12 * count
  EXPECT_CLAW_ERROR(huge.open(), huge.idx_file(), "truncated");
}

TEST(IndexedDatasetErrors, TrailingBytes) {
  Damaged d;
  d.idx += "xyz";
  EXPECT_CLAW_ERROR(d.open(), d.idx_file(), "trailing bytes");
}

TEST(IndexedDatasetErrors, MultimodalIndexIsNamed) {
  // Megatron's multimodal index appends one i8 mode per sequence.
  Damaged d;
  d.idx += std::string(3, '\0');
  EXPECT_CLAW_ERROR(d.open(), d.idx_file(), "multimodal", "text datasets only");
}

TEST(IndexedDatasetErrors, BadDocumentIndices) {
  Damaged first;
  first.set<int64_t>(70, 1);
  EXPECT_CLAW_ERROR(first.open(), first.idx_file(), "document index 0 is 1");
  Damaged falling;
  falling.set<int64_t>(86, 0);  // entries 0 1 0 3
  EXPECT_CLAW_ERROR(falling.open(), falling.idx_file(), "document index 2 is 0");
  Damaged last;
  last.set<int64_t>(94, 2);  // entries 0 1 2 2
  EXPECT_CLAW_ERROR(last.open(), last.idx_file(), "last document index is 2", "sequence count 3");
}

TEST(IndexedDatasetErrors, BadSequences) {
  Damaged negative;
  negative.set<int32_t>(38, -1);
  EXPECT_CLAW_ERROR(negative.open(), negative.idx_file(), "sequence 1", "negative length -1");
  Damaged odd;
  odd.set<int64_t>(54, 7);  // a u16 sequence cannot start at byte 7
  EXPECT_CLAW_ERROR(odd.open(), odd.idx_file(), "sequence 1", "byte 7", "u16");
}

TEST(IndexedDatasetErrors, BinShorterThanTheIndexImplies) {
  Damaged d;
  d.bin.resize(d.bin.size() - 2);
  EXPECT_CLAW_ERROR(d.open(), d.bin_file(), "10 bytes", "shorter", "sequence 2", "[8, 12)");
}

}  // namespace
}  // namespace claw::data
