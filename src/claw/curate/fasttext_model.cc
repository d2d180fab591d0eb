// fastText rounds every product before adding it: no fused multiply-add
// anywhere in this file, or probabilities drift from fastText's by an ulp.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "claw/curate/fasttext_model.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>

#include "claw/core/error.h"

namespace claw::curate {
namespace {

constexpr int32_t kMagic = 793712314;     // FASTTEXT_FILEFORMAT_MAGIC_INT32
constexpr int32_t kVersion = 12;          // FASTTEXT_VERSION of 0.9.2
constexpr int32_t kKsub = 256;            // ProductQuantizer: 8-bit codes
constexpr std::string_view kEos = "</s>";
constexpr int64_t kMaxDecodedBytes = int64_t{1} << 28;  // decode a quantized input matrix up to 256 MiB
constexpr std::string_view kLabelPrefix = "__label__";  // Args::label; not stored in the file

enum class Loss : int32_t { hs = 1, ns = 2, softmax = 3, ova = 4 };
enum class ModelKind : int32_t { cbow = 1, sg = 2, sup = 3 };

// fastText's std_log: log(x + 1e-5) in double, rounded to float.
inline float std_log(float x) { return static_cast<float>(std::log(static_cast<double>(x) + 1e-5)); }

inline bool heap_less(const std::pair<float, int32_t>& l, const std::pair<float, int32_t>& r) {
  return l.first > r.first;  // fastText's comparePairs: a min-heap on the score
}

// FNV-1a over the bytes, each sign-extended to 32 bits (fastText's hash).
inline uint32_t fnv_step(uint32_t h, char c) {
  return (h ^ static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(c)))) * 16777619u;
}
inline uint32_t fnv(std::string_view s) {
  uint32_t h = 2166136261u;
  for (char c : s) h = fnv_step(h, c);
  return h;
}

// Dictionary::readWord's separators: " \n\r\t\v\f\0".
constexpr auto kSpace = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : {' ', '\n', '\r', '\t', '\v', '\f', '\0'}) t[c] = true;
  return t;
}();
inline bool is_space(unsigned char c) { return kSpace[c]; }
inline bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// a % d for every 32-bit a, without a division (Lemire, Kaser, Kurz 2019).
struct FastMod {
  uint64_t m = 0;
  uint32_t d = 1;
  explicit FastMod(uint32_t divisor = 1) : m(~uint64_t{0} / divisor + 1), d(divisor) {}
  uint32_t operator()(uint32_t a) const {
    const uint64_t low = m * a;
    return static_cast<uint32_t>((static_cast<unsigned __int128>(low) * d) >> 64);
  }
};

// The character n-grams of `w` ("<word>"): for each start that begins a
// UTF-8 character, the hashes of the substrings of 1..maxn characters,
// emitted for n >= minn except the lone "<" and ">" (Dictionary::
// computeSubwords).
template <typename Emit>
inline void for_each_char_ngram(const char* w, size_t len, int32_t minn, int32_t maxn, Emit&& emit) {
  for (size_t i = 0; i < len; ++i) {
    if (is_continuation(w[i])) continue;
    uint32_t h = 2166136261u;
    size_t j = i;
    for (int32_t n = 1; j < len && n <= maxn; ++n) {
      do h = fnv_step(h, w[j++]);
      while (j < len && is_continuation(w[j]));
      if (n >= minn && !(n == 1 && (i == 0 || j == len))) emit(h);
    }
  }
}

// Reads the file with bounds checks; every failure names the file and the
// part being read.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) fail("fastText model \"{}\" cannot be opened", path);
    in_.seekg(0, std::ios::end);
    size_ = static_cast<int64_t>(in_.tellg());
    in_.seekg(0, std::ios::beg);
  }
  void bytes(void* p, int64_t n, const char* what) {
    if (n < 0 || n > remaining())
      fail("fastText model \"{}\" is truncated or corrupt: {} needs {} bytes, {} are left", path_, what, n,
           remaining());
    in_.read(static_cast<char*>(p), n);
    if (in_.gcount() != n) fail("fastText model \"{}\": reading {} failed", path_, what);
  }
  template <typename T>
  T pod(const char* what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  bool flag(const char* what) { return pod<uint8_t>(what) != 0; }
  template <typename T>
  void vec(std::vector<T>& v, int64_t n, const char* what) {
    if (n < 0 || n > remaining() / static_cast<int64_t>(sizeof(T)))
      fail("fastText model \"{}\" is truncated or corrupt: {} has {} elements, more than the file holds", path_,
           what, n);
    v.resize(static_cast<size_t>(n));
    bytes(v.data(), n * static_cast<int64_t>(sizeof(T)), what);
  }
  std::string cstring(const char* what) {
    std::string s;
    std::getline(in_, s, '\0');
    if (!in_) fail("fastText model \"{}\" is truncated: {} has no terminating NUL", path_, what);
    return s;
  }
  int64_t remaining() { return size_ - static_cast<int64_t>(in_.tellg()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t size_ = 0;
};

// A product-quantized matrix (QuantMatrix + ProductQuantizer).
struct Pq {
  int32_t dim = 0, nsubq = 0, dsub = 0, lastdsub = 0;
  std::vector<float> centroids;  // dim * 256
  const float* centroid(int32_t m, uint8_t code) const {
    if (m == nsubq - 1) return &centroids[static_cast<size_t>(m) * kKsub * dsub + static_cast<size_t>(code) * lastdsub];
    return &centroids[(static_cast<size_t>(m) * kKsub + code) * dsub];
  }
  void load(Reader& r, const char* what) {
    dim = r.pod<int32_t>(what);
    nsubq = r.pod<int32_t>(what);
    dsub = r.pod<int32_t>(what);
    lastdsub = r.pod<int32_t>(what);
    if (dim <= 0 || nsubq <= 0 || dsub <= 0 || lastdsub <= 0 || lastdsub > dsub ||
        static_cast<int64_t>(nsubq - 1) * dsub + lastdsub != dim)
      fail("fastText model \"{}\": {} has an inconsistent shape (dim {}, nsubq {}, dsub {}, lastdsub {})", r.path(),
           what, dim, nsubq, dsub, lastdsub);
    r.vec(centroids, static_cast<int64_t>(dim) * kKsub, what);
  }
};

struct Matrix {
  int64_t rows = 0, cols = 0;
  bool quant = false;
  std::vector<float> dense;  // rows * cols, when !quant
  bool qnorm = false;
  std::vector<uint8_t> codes, norm_codes;
  Pq pq, npq;

  float norm(int64_t row) const { return qnorm ? npq.centroid(0, norm_codes[row])[0] : 1.0f; }
  // Row `row` without its norm: the concatenated centroids.
  void decode(int64_t row, float* out) const {
    const uint8_t* code = codes.data() + row * pq.nsubq;
    for (int32_t m = 0; m < pq.nsubq; ++m) {
      const int32_t d = m == pq.nsubq - 1 ? pq.lastdsub : pq.dsub;
      const float* c = pq.centroid(m, code[m]);
      for (int32_t k = 0; k < d; ++k) out[m * pq.dsub + k] = c[k];
    }
  }

  void load_dense(Reader& r, const char* what) {
    rows = r.pod<int64_t>(what);
    cols = r.pod<int64_t>(what);
    if (rows < 0 || cols <= 0) fail("fastText model \"{}\": {} has shape {} x {}", r.path(), what, rows, cols);
    if (rows > r.remaining() / 4 / cols)
      fail("fastText model \"{}\" is truncated: {} ({} x {} floats) does not fit in the file", r.path(), what, rows,
           cols);
    r.vec(dense, rows * cols, what);
  }
  void load_quant(Reader& r, const char* what) {
    quant = true;
    qnorm = r.flag(what);
    rows = r.pod<int64_t>(what);
    cols = r.pod<int64_t>(what);
    const int32_t codesize = r.pod<int32_t>(what);
    if (rows < 0 || cols <= 0) fail("fastText model \"{}\": {} has shape {} x {}", r.path(), what, rows, cols);
    r.vec(codes, codesize, what);
    pq.load(r, what);
    if (pq.dim != cols || static_cast<int64_t>(codesize) != rows * pq.nsubq)
      fail("fastText model \"{}\": {} codes ({} bytes, {} sub-quantizers of dim {}) do not match its {} x {} shape",
           r.path(), what, codesize, pq.nsubq, pq.dim, rows, cols);
    if (qnorm) {
      r.vec(norm_codes, rows, what);
      npq.load(r, what);
    }
  }
};

struct Node {
  int32_t parent = -1, left = -1, right = -1;
  int64_t count = 0;
};

// The rows of the words a thread has met that are not in the dictionary,
// so that a repeated word skips its n-gram hashing and the pruned-bucket
// lookups (lid.176 knows 7,235 words; two thirds of English tokens are not
// among them). Direct-mapped on the word's hash: a colliding word replaces
// the old one, and everything is dropped when the arenas fill.
class WordCache {
 public:
  static constexpr uint32_t kSlots = 1u << 14;
  static constexpr size_t kMaxRows = size_t{1} << 22, kMaxChars = size_t{1} << 22;

  explicit WordCache(uint64_t model) : model_(model) { clear(); }
  uint64_t model() const { return model_; }

  // The cached rows of `word` (hash `h`), or null.
  const int32_t* find(std::string_view word, uint32_t h, int32_t& n) const {
    const Slot& e = slots_[h & (kSlots - 1)];
    if (e.hash != h || e.len != word.size() || std::memcmp(chars_.data() + e.chars, word.data(), word.size()) != 0)
      return nullptr;
    n = static_cast<int32_t>(e.count);
    return rows_.data() + e.rows;
  }
  void insert(std::string_view word, uint32_t h, const std::vector<int32_t>& rows) {
    if (rows_.size() + rows.size() > kMaxRows || chars_.size() + word.size() > kMaxChars) clear();
    slots_[h & (kSlots - 1)] = Slot{h, static_cast<uint32_t>(word.size()), static_cast<uint32_t>(chars_.size()),
                                    static_cast<uint32_t>(rows_.size()), static_cast<uint32_t>(rows.size())};
    chars_.append(word);
    rows_.insert(rows_.end(), rows.begin(), rows.end());
  }

 private:
  struct Slot {
    uint32_t hash = 0, len = UINT32_MAX, chars = 0, rows = 0, count = 0;
  };
  void clear() {
    slots_.assign(kSlots, Slot{});
    rows_.clear();
    chars_.clear();
  }
  uint64_t model_;
  std::vector<Slot> slots_;
  std::vector<int32_t> rows_;
  std::string chars_;
};

struct Scratch {
  std::vector<float> hidden, row, output;
  std::vector<int32_t> hashes, ids;
  std::string word;
  // A cache per model the thread uses (a pipeline may run the language and
  // a quality classifier side by side), by the model's serial number.
  std::vector<WordCache> caches;
  WordCache& cache(uint64_t model) {
    for (WordCache& c : caches)
      if (c.model() == model) return c;
    constexpr size_t kMaxModels = 4;
    if (caches.size() < kMaxModels) return caches.emplace_back(model);
    return caches[model % kMaxModels] = WordCache(model);
  }
};

uint64_t next_serial() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

struct FastTextModel::Impl {
  std::string path;
  uint64_t serial = next_serial();  // tells models apart in the threads' word caches
  int32_t dim = 0, word_ngrams = 1, bucket = 0, minn = 0, maxn = 0;
  Loss loss = Loss::softmax;

  // Dictionary: entries (words first, then labels), an open-addressing
  // table on the FNV hash, and each word's input rows (its own, then its
  // character n-grams').
  int32_t nwords = 0, nlabels = 0;
  std::string chars;
  std::vector<uint32_t> offsets;  // size + 1
  std::vector<uint32_t> hashes;
  std::vector<uint8_t> is_label;
  std::vector<int32_t> table;
  uint32_t table_mask = 0;
  std::vector<std::string> labels;
  std::vector<int64_t> label_counts;
  std::vector<int32_t> sub_offsets, sub_rows;

  // Pruned n-grams (quantize -cutoff): a bitmap over the buckets with rank
  // counts, and each kept bucket's row (minus nwords) in bucket order.
  int64_t prune_size = -1;
  std::vector<uint64_t> keep_bits;
  std::vector<uint32_t> keep_rank;
  std::vector<int32_t> keep_row;
  FastMod bucket_mod;

  Matrix input, output;
  // The input rows as fastText adds them (a quantized row's centroids times
  // its norm, each product rounded to float as in ProductQuantizer::addcode);
  // a pruned model's kept n-grams follow the words in bucket order. Empty
  // when that would exceed kMaxDecodedBytes: rows are then decoded per use.
  std::vector<float> rows;
  bool decoded = false;

  // The output matrix without its norms, transposed (label fastest), and
  // the norms (1 for a dense matrix).
  std::vector<float> out_t, out_norm;
  int32_t padded_labels = 0;
  std::vector<Node> tree;
  int32_t tree_depth = 0;  // edges on the longest root-to-leaf path
  float sigmoid_table[513];

  std::string_view entry(int32_t i) const { return {chars.data() + offsets[i], offsets[i + 1] - offsets[i]}; }

  int32_t find(std::string_view w, uint32_t h) const {
    for (uint32_t slot = h & table_mask;; slot = (slot + 1) & table_mask) {
      const int32_t id = table[slot];
      if (id < 0) return -1;
      if (hashes[id] == h && entry(id) == w) return id;
    }
  }

  // Dictionary::pushHash: the row of bucket `id`, or -1 when pruned away.
  int32_t ngram_row(uint32_t id) const {
    if (prune_size < 0) return nwords + static_cast<int32_t>(id);
    if (prune_size == 0) return -1;
    const uint64_t bits = keep_bits[id >> 6];
    if (((bits >> (id & 63)) & 1) == 0) return -1;
    const uint32_t rank = keep_rank[id >> 6] + std::popcount(bits & ((uint64_t{1} << (id & 63)) - 1));
    return nwords + (decoded ? static_cast<int32_t>(rank) : keep_row[rank]);
  }

  // Vector::addRow: h += row (fastText's element order and rounding).
  void add_row(int32_t row, float* __restrict h, float* __restrict tmp) const {
    if (decoded) {
      const float* r = rows.data() + static_cast<size_t>(row) * dim;
      if (dim == 16) {  // lid.176
        for (int32_t j = 0; j < 16; ++j) h[j] += r[j];
      } else {
        for (int32_t j = 0; j < dim; ++j) h[j] += r[j];
      }
      return;
    }
    const float alpha = input.norm(row);
    input.decode(row, tmp);
    for (int32_t j = 0; j < dim; ++j) h[j] += alpha * tmp[j];
  }

  float sigmoid(float x) const {
    if (x < -8.0f) return 0.0f;
    if (x > 8.0f) return 1.0f;
    return sigmoid_table[static_cast<int64_t>((x + 8.0f) * 512.0f / 8.0f / 2.0f)];
  }

  // HierarchicalSoftmaxLoss::dfs; dots[i] = w_out[i] . hidden.
  void dfs(int32_t k, float min_score, int32_t node, float score, std::vector<std::pair<float, int32_t>>& heap,
           const float* dots) const {
    if (score < min_score) return;
    if (static_cast<int32_t>(heap.size()) == k && score < heap.front().first) return;
    const Node& n = tree[node];
    if (n.left == -1 && n.right == -1) {
      heap.emplace_back(score, node);
      std::push_heap(heap.begin(), heap.end(), heap_less);
      if (static_cast<int32_t>(heap.size()) > k) {
        std::pop_heap(heap.begin(), heap.end(), heap_less);
        heap.pop_back();
      }
      return;
    }
    float f = dots[node - nlabels];
    f = static_cast<float>(1. / (1 + std::exp(-f)));
    dfs(k, min_score, n.left, score + std_log(static_cast<float>(1.0 - f)), heap, dots);
    dfs(k, min_score, n.right, score + std_log(f), heap, dots);
  }

  template <int D>
  size_t accumulate(std::string_view text, float* h, Scratch& s) const;
  void load(Reader& r);
  void build();
};

void FastTextModel::Impl::load(Reader& r) {
  const int32_t magic = r.pod<int32_t>("the header");
  if (magic != kMagic)
    fail("\"{}\" is not a fastText model (magic number {}, expected {})", path, magic, kMagic);
  const int32_t version = r.pod<int32_t>("the header");
  if (version > kVersion || version < 11)
    fail("fastText model \"{}\" has format version {}; fastText 0.9.2 reads 11 and 12", path, version);

  // Args::load: 12 int32 and a double.
  int32_t a[12];
  r.bytes(a, sizeof a, "the arguments");
  (void)r.pod<double>("the arguments");
  dim = a[0];
  word_ngrams = a[5];
  const int32_t loss_id = a[6], model_id = a[7];
  bucket = a[8];
  minn = a[9];
  maxn = a[10];
  if (model_id != static_cast<int32_t>(ModelKind::sup))
    fail("fastText model \"{}\" is a {} model; only supervised models (fasttext supervised) predict labels", path,
         model_id == 1 ? "cbow" : model_id == 2 ? "skipgram" : "unknown (" + std::to_string(model_id) + ")");
  if (loss_id < 1 || loss_id > 4) fail("fastText model \"{}\" has unknown loss {}", path, loss_id);
  loss = static_cast<Loss>(loss_id);
  if (dim <= 0 || bucket < 0) fail("fastText model \"{}\" has dim {} and bucket {}", path, dim, bucket);
  if (version == 11) maxn = 0;  // old supervised models had no character n-grams

  // Dictionary::load.
  const int32_t size = r.pod<int32_t>("the dictionary");
  nwords = r.pod<int32_t>("the dictionary");
  nlabels = r.pod<int32_t>("the dictionary");
  (void)r.pod<int64_t>("the dictionary");
  prune_size = r.pod<int64_t>("the dictionary");
  if (size < 0 || nwords < 0 || nlabels <= 0 || static_cast<int64_t>(nwords) + nlabels != size)
    fail("fastText model \"{}\": dictionary of {} entries has {} words and {} labels", path, size, nwords, nlabels);
  offsets.assign(1, 0);
  is_label.resize(size);
  for (int32_t i = 0; i < size; ++i) {
    chars += r.cstring("a dictionary entry");
    offsets.push_back(static_cast<uint32_t>(chars.size()));
    const int64_t count = r.pod<int64_t>("a dictionary entry");
    const int8_t type = r.pod<int8_t>("a dictionary entry");
    is_label[i] = type == 1;
    if ((type == 1) != (i >= nwords))
      fail("fastText model \"{}\": dictionary entry {} (\"{}\") is out of order (words first, then labels)", path, i,
           std::string(entry(i)));
    if (type == 1) {
      labels.emplace_back(entry(i));
      label_counts.push_back(count);
    }
  }
  if (prune_size > 0) {
    if (bucket <= 0) fail("fastText model \"{}\" prunes n-grams but has no buckets", path);
    std::vector<int32_t> pairs;
    r.vec(pairs, prune_size * 2, "the pruned n-gram index");
    keep_bits.assign((static_cast<size_t>(bucket) + 63) / 64, 0);
    for (int64_t i = 0; i < prune_size; ++i)
      if (pairs[2 * i] >= 0 && pairs[2 * i] < bucket) keep_bits[pairs[2 * i] >> 6] |= uint64_t{1} << (pairs[2 * i] & 63);
    keep_rank.resize(keep_bits.size());
    uint32_t rank = 0;
    for (size_t w = 0; w < keep_bits.size(); ++w) {
      keep_rank[w] = rank;
      rank += std::popcount(keep_bits[w]);
    }
    keep_row.assign(rank, 0);
    for (int64_t i = 0; i < prune_size; ++i) {  // later pairs win, as in the unordered_map
      const int32_t id = pairs[2 * i];
      if (id < 0 || id >= bucket) continue;
      const uint64_t below = keep_bits[id >> 6] & ((uint64_t{1} << (id & 63)) - 1);
      keep_row[keep_rank[id >> 6] + std::popcount(below)] = pairs[2 * i + 1];
    }
  }

  // Matrices.
  const bool quant_input = r.flag("the input matrix flag");
  if (quant_input)
    input.load_quant(r, "the input matrix");
  else
    input.load_dense(r, "the input matrix");
  if (!quant_input && prune_size >= 0)
    fail("fastText model \"{}\" is invalid: a pruned dictionary with a dense input matrix (fastText issue #332)",
         path);
  const bool qout = r.flag("the output matrix flag");
  if (quant_input && qout)
    output.load_quant(r, "the output matrix");
  else
    output.load_dense(r, "the output matrix");

  if (input.cols != dim || output.cols != dim)
    fail("fastText model \"{}\": matrices have {} and {} columns, dim is {}", path, input.cols, output.cols, dim);
  if (output.rows != nlabels)
    fail("fastText model \"{}\": output matrix has {} rows for {} labels", path, output.rows, nlabels);
  const int64_t ngram_rows = prune_size >= 0 ? static_cast<int64_t>(keep_row.size()) : bucket;
  if (input.rows < nwords + (prune_size >= 0 ? 0 : ngram_rows))
    fail("fastText model \"{}\": input matrix has {} rows for {} words and {} buckets", path, input.rows, nwords,
         bucket);
  for (int32_t row : keep_row)
    if (row < 0 || nwords + static_cast<int64_t>(row) >= input.rows)
      fail("fastText model \"{}\": pruned n-gram row {} is outside the input matrix ({} rows)", path, row,
           input.rows);
}

void FastTextModel::Impl::build() {
  const int32_t size = nwords + nlabels;
  if (bucket > 0) bucket_mod = FastMod(static_cast<uint32_t>(bucket));

  // Word table: later duplicates win, as in word2int_.
  uint32_t cap = 16;
  while (cap < 2u * static_cast<uint32_t>(size) + 1) cap <<= 1;
  table.assign(cap, -1);
  table_mask = cap - 1;
  hashes.resize(size);
  for (int32_t i = 0; i < size; ++i) {
    const uint32_t h = hashes[i] = fnv(entry(i));
    uint32_t slot = h & table_mask;
    while (table[slot] >= 0 && !(hashes[table[slot]] == h && entry(table[slot]) == entry(i)))
      slot = (slot + 1) & table_mask;
    table[slot] = i;
  }

  // The input rows, decoded once if they fit.
  if (!input.quant) {
    rows = std::move(input.dense);
    decoded = true;
  } else {
    const int64_t n = prune_size >= 0 ? nwords + static_cast<int64_t>(keep_row.size()) : input.rows;
    if (n * dim * static_cast<int64_t>(sizeof(float)) <= kMaxDecodedBytes) {
      rows.resize(static_cast<size_t>(n) * dim);
      std::vector<float> c(dim);
      for (int64_t r = 0; r < n; ++r) {
        const int64_t src = r < nwords || prune_size < 0 ? r : nwords + keep_row[r - nwords];
        const float alpha = input.norm(src);
        input.decode(src, c.data());
        for (int32_t j = 0; j < dim; ++j) rows[static_cast<size_t>(r) * dim + j] = alpha * c[j];
      }
      decoded = true;
      input.codes = {};
    }
  }

  // Dictionary::initNgrams for the words.
  sub_offsets.assign(1, 0);
  std::string w;
  for (int32_t i = 0; i < nwords; ++i) {
    sub_rows.push_back(i);
    if (maxn > 0 && entry(i) != kEos && bucket > 0) {
      w.clear();
      w += '<';
      w += entry(i);
      w += '>';
      for_each_char_ngram(w.data(), w.size(), minn, maxn, [&](uint32_t h) {
        if (int32_t row = ngram_row(bucket_mod(h)); row >= 0) sub_rows.push_back(row);
      });
    }
    sub_offsets.push_back(static_cast<int32_t>(sub_rows.size()));
  }


  // Output rows, decoded once.
  std::vector<float> out_rows(static_cast<size_t>(nlabels) * dim);
  out_norm.assign(nlabels, 1.0f);
  for (int32_t i = 0; i < nlabels; ++i) {
    if (output.quant) {
      output.decode(i, &out_rows[static_cast<size_t>(i) * dim]);
      out_norm[i] = output.norm(i);
    } else {
      std::copy_n(&output.dense[static_cast<size_t>(i) * dim], dim, &out_rows[static_cast<size_t>(i) * dim]);
    }
  }
  padded_labels = (nlabels + 15) / 16 * 16;
  out_t.assign(static_cast<size_t>(padded_labels) * dim, 0.0f);
  for (int32_t i = 0; i < nlabels; ++i)
    for (int32_t j = 0; j < dim; ++j) out_t[static_cast<size_t>(j) * padded_labels + i] = out_rows[static_cast<size_t>(i) * dim + j];

  // Loss tables and the Huffman tree (HierarchicalSoftmaxLoss::buildTree).
  for (int i = 0; i <= 512; ++i) {
    const float x = static_cast<float>(i * 2 * 8) / 512.0f - 8.0f;
    sigmoid_table[i] = static_cast<float>(1.0 / (1.0 + std::exp(-x)));
  }
  if (loss == Loss::hs) {
    const int32_t osz = nlabels;
    tree.assign(2 * osz - 1, Node{});
    for (auto& n : tree) n.count = static_cast<int64_t>(1e15);
    for (int32_t i = 0; i < osz; ++i) tree[i].count = label_counts[i];
    int32_t leaf = osz - 1, node = osz;
    for (int32_t i = osz; i < 2 * osz - 1; ++i) {
      int32_t mini[2] = {0, 0};
      for (int32_t& m : mini) m = (leaf >= 0 && tree[leaf].count < tree[node].count) ? leaf-- : node++;
      tree[i].left = mini[0];
      tree[i].right = mini[1];
      tree[i].count = tree[mini[0]].count + tree[mini[1]].count;
      tree[mini[0]].parent = tree[mini[1]].parent = i;
    }
    for (int32_t leaf = 0; leaf < osz; ++leaf) {
      int32_t d = 0;
      for (int32_t n = leaf; tree[n].parent >= 0; n = tree[n].parent) ++d;
      tree_depth = std::max(tree_depth, d);
    }
  }
}

FastTextModel::FastTextModel(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  Reader r(path);
  impl->load(r);
  impl->build();
  impl_ = std::move(impl);
}

FastTextModel::~FastTextModel() = default;
FastTextModel::FastTextModel(FastTextModel&&) noexcept = default;
FastTextModel& FastTextModel::operator=(FastTextModel&&) noexcept = default;

int32_t FastTextModel::num_labels() const { return impl_->nlabels; }
const std::string& FastTextModel::label(int32_t i) const {
  if (i < 0 || i >= impl_->nlabels) fail("label index {} is out of range [0, {})", i, impl_->nlabels);
  return impl_->labels[i];
}
int32_t FastTextModel::label_id(std::string_view label) const {
  const int32_t id = impl_->find(label, fnv(label));
  return id >= impl_->nwords ? id - impl_->nwords : -1;
}
int32_t FastTextModel::dim() const { return impl_->dim; }

float FastTextModel::threshold_below(float p) const {
  // Each log term is log(x + 1e-5) <= 1e-5, so a leaf's score exceeds its
  // ancestors' by at most depth * 1e-5 (plus float rounding, one ulp-ish
  // per term: 1e-5 more per level is ample); then 1% for good measure.
  const double slack = std::exp(-2e-5 * (impl_->tree_depth + 1));
  return static_cast<float>(std::max(0.0, static_cast<double>(p) * slack * 0.99 - 2e-5));
}
bool FastTextModel::quantized() const { return impl_->input.quant; }

// Dictionary::getLine and Model::computeHidden's sum: the rows are added to
// `h` as they come. D = dim when fixed at compile time (the accumulator then
// lives in registers), 0 otherwise. Returns the number of rows.
template <int D>
size_t FastTextModel::Impl::accumulate(std::string_view text, float* h, Scratch& s) const {
  const Impl& m = *this;
  alignas(64) float acc[D > 0 ? D : 1] = {};
  float* tmp = s.row.data();
  WordCache& cache = s.cache(serial);
  s.hashes.clear();
  size_t count = 0;
  auto add = [&](int32_t row) {
    if constexpr (D > 0) {
      const float* r = rows.data() + static_cast<size_t>(row) * D;
      for (int32_t j = 0; j < D; ++j) acc[j] += r[j];
    } else {
      m.add_row(row, h, tmp);
    }
    ++count;
  };
  // Dictionary::getLine, with the rows added as they come. The text is one
  // line: its end is read as the word "</s>", which ends it.
  const char* p = text.data();
  const size_t n = text.size();
  size_t i = 0;
  while (true) {
    while (i < n && is_space(static_cast<unsigned char>(p[i]))) ++i;
    const size_t start = i;
    while (i < n && !is_space(static_cast<unsigned char>(p[i]))) ++i;
    const std::string_view token = start == n ? kEos : std::string_view(p + start, i - start);
    const uint32_t th = fnv(token);
    const int32_t wid = m.find(token, th);
    const bool label = wid < 0 ? token.starts_with(kLabelPrefix) : m.is_label[wid] != 0;
    if (!label) {
      if (wid >= 0) {
        if (m.maxn <= 0) {
          add(wid);
        } else {
          for (int32_t q = m.sub_offsets[wid]; q < m.sub_offsets[wid + 1]; ++q) add(m.sub_rows[q]);
        }
      } else if (token != kEos && m.bucket > 0) {
        int32_t nr = 0;
        const int32_t* cached = cache.find(token, th, nr);
        if (!cached) {
          s.word.resize(token.size() + 2);
          char* w = s.word.data();
          w[0] = '<';
          std::memcpy(w + 1, token.data(), token.size());
          w[token.size() + 1] = '>';
          s.ids.clear();
          for_each_char_ngram(w, token.size() + 2, m.minn, m.maxn, [&](uint32_t hh) {
            if (int32_t row = m.ngram_row(m.bucket_mod(hh)); row >= 0) s.ids.push_back(row);
          });
          cache.insert(token, th, s.ids);
          cached = s.ids.data();
          nr = static_cast<int32_t>(s.ids.size());
        }
        // Rows prefetched first, then the adds, so the loads overlap.
        if constexpr (D > 0)
          for (int32_t q = 0; q < nr; ++q) __builtin_prefetch(rows.data() + static_cast<size_t>(cached[q]) * D);
        for (int32_t q = 0; q < nr; ++q) add(cached[q]);
      }
      if (m.word_ngrams > 1) s.hashes.push_back(static_cast<int32_t>(th));
    }
    if (token == kEos) break;
  }
  // Dictionary::addWordNgrams.
  if (m.word_ngrams > 1 && m.bucket > 0) {
    const auto& hs = s.hashes;
    const int32_t nh = static_cast<int32_t>(hs.size());
    for (int32_t a = 0; a < nh; ++a) {
      uint64_t hh = static_cast<uint64_t>(static_cast<int64_t>(hs[a]));
      for (int32_t b = a + 1; b < nh && b < a + m.word_ngrams; ++b) {
        hh = hh * 116049371 + static_cast<uint64_t>(static_cast<int64_t>(hs[b]));
        if (int32_t row = m.ngram_row(static_cast<uint32_t>(hh % static_cast<uint64_t>(m.bucket))); row >= 0) add(row);
      }
    }
  }
  if constexpr (D > 0) std::copy_n(acc, D, h);
  return count;
}

bool FastTextModel::embed(std::string_view text, float* h) const {
  const Impl& m = *impl_;
  Scratch& s = scratch();
  std::fill_n(h, m.dim, 0.0f);
  s.row.resize(m.dim);
  const size_t count = m.decoded && m.dim == 16 ? m.accumulate<16>(text, h, s) : m.accumulate<0>(text, h, s);
  if (count == 0) return false;
  const float inv = static_cast<float>(1.0 / static_cast<double>(count));
  for (int32_t j = 0; j < m.dim; ++j) h[j] *= inv;
  return true;
}

void FastTextModel::predict(std::string_view text, std::vector<std::pair<float, int32_t>>& out, int32_t k,
                            float threshold) const {
  if (k == 0 || k < -1) fail("fastText predict: k = {} must be -1 (all labels) or positive", k);
  Scratch& s = scratch();
  s.hidden.resize(impl_->dim);
  out.clear();
  if (embed(text, s.hidden.data())) classify(s.hidden.data(), out, k, threshold);
}

void FastTextModel::classify(const float* h, std::vector<std::pair<float, int32_t>>& out, int32_t k,
                             float threshold) const {
  const Impl& m = *impl_;
  out.clear();
  if (k == -1) k = m.nlabels;
  if (k <= 0) fail("fastText predict: k = {} must be -1 (all labels) or positive", k);
  Scratch& s = scratch();

  // W_out hidden: each row's dot product summed in fastText's order
  // (DenseMatrix::dotRow, ProductQuantizer::mulcode), all rows at once.
  const int32_t L = m.padded_labels;
  s.output.assign(L, 0.0f);
  float* o = s.output.data();
  for (int32_t j = 0; j < m.dim; ++j) {
    const float* w = m.out_t.data() + static_cast<size_t>(j) * L;
    const float x = h[j];
    for (int32_t q = 0; q < L; ++q) o[q] += w[q] * x;
  }
  if (m.output.quant)
    for (int32_t q = 0; q < m.nlabels; ++q) o[q] *= m.out_norm[q];

  if (m.loss == Loss::hs) {
    m.dfs(k, std_log(threshold), 2 * m.nlabels - 2, 0.0f, out, o);
  } else {
    if (m.loss == Loss::softmax) {
      float mx = o[0], z = 0.0f;
      for (int32_t q = 0; q < m.nlabels; ++q) mx = std::max(o[q], mx);
      for (int32_t q = 0; q < m.nlabels; ++q) {
        o[q] = static_cast<float>(::exp(static_cast<double>(o[q] - mx)));
        z += o[q];
      }
      for (int32_t q = 0; q < m.nlabels; ++q) o[q] /= z;
    } else {
      for (int32_t q = 0; q < m.nlabels; ++q) o[q] = m.sigmoid(o[q]);
    }
    // Loss::findKBest.
    for (int32_t q = 0; q < m.nlabels; ++q) {
      if (o[q] < threshold) continue;
      const float score = std_log(o[q]);
      if (static_cast<int32_t>(out.size()) == k && score < out.front().first) continue;
      out.emplace_back(score, q);
      std::push_heap(out.begin(), out.end(), heap_less);
      if (static_cast<int32_t>(out.size()) > k) {
        std::pop_heap(out.begin(), out.end(), heap_less);
        out.pop_back();
      }
    }
  }
  std::sort_heap(out.begin(), out.end(), heap_less);
  for (auto& [score, id] : out) score = std::exp(score);
}

}  // namespace claw::curate
