// Inference for fastText supervised classifiers (Joulin et al., "Bag of
// Tricks for Efficient Text Classification", 2016), bit-for-bit what
// fastText 0.9.2 returns for one line of text, at several times its speed:
// FastText::predictLine(k, threshold) on "text\n", which is what the Python
// package's model.predict(text) and the fasttext predict command read (and
// datatrove's language filter, on the text with newlines made spaces).
//
// A line is split on " \n\r\t\v\f\0" into tokens, and its end is the token
// "</s>" (a dictionary word, whose row counts like any word's; predict
// treats the newlines inside `text` as spaces). A token that is a label
// (a dictionary label, or an unknown token starting with "__label__") is
// skipped. A word contributes, in order, its dictionary row (if known) and
// the rows of its character n-grams: the substrings of "<word>" of minn..maxn
// UTF-8 characters, each hashed with 32-bit FNV-1a (bytes sign-extended, as
// fastText's released models were trained) to nwords + hash % bucket (for a
// quantized model with a pruned vocabulary, through the kept-n-gram map;
// n-grams not kept are dropped). A known word's n-grams are those of its
// dictionary entry; "</s>" has none and ends the line. After all tokens come
// the word n-grams: for each run of 2..wordNgrams consecutive word hashes
// h_i, h = h * 116049371 + h_j (uint64, the 32-bit hashes sign-extended),
// row nwords + h % bucket.
//
//   hidden = (1/N) sum of the N rows   (float, rows added in the order above)
//   softmax:    p = softmax(W_out hidden)        every label
//   ns / ova:   p = sigmoid(W_out hidden)        fastText's 512-entry table
//   hs:         DFS of the Huffman tree over the label counts; a node's
//               right child has log p += log(sigmoid(w_node . hidden) + 1e-5),
//               the left log(1 - sigmoid + 1e-5); subtrees whose score falls
//               below log(threshold + 1e-5) are not explored, so with
//               threshold 0 only labels with p >~ 1e-5 come back.
//   score = log(p + 1e-5) for softmax / sigmoid; returned prob = exp(score).
//
// Rows of a quantized matrix are product-quantized (Jegou et al. 2011):
// row i = norm_i * concat_m centroid[m][code[i][m]], decoded on the fly.
// Every float operation is done in fastText's order and precision (sums
// sequential in the row index, no fused multiply-add: this file is compiled
// with fp-contract off), and results are ordered with the same std heap
// calls, so ties come out in the same order.
//
// Thread-safety: a FastTextModel is immutable after construction; predict
// may be called from any number of threads (scratch is thread_local).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace claw::curate {

class FastTextModel {
 public:
  // Loads a fastText .bin or .ftz (quantized input; quantized output if the
  // model was quantized with -qout). claw::Error naming `path` if the file
  // is missing, truncated, not a fastText model, or not a supervised one.
  explicit FastTextModel(const std::string& path);
  ~FastTextModel();
  FastTextModel(FastTextModel&&) noexcept;
  FastTextModel& operator=(FastTextModel&&) noexcept;

  // (probability, label index) best first, as predictLine(k, threshold) on
  // `text` + "\n" (newlines inside `text` count as spaces). k = -1: every
  // label (for hs: every label the tree search reaches). Empty only when no
  // token has a row (a model whose dictionary lacks "</s>").
  // `out` is cleared first; reuse it across calls to avoid allocation.
  void predict(std::string_view text, std::vector<std::pair<float, int32_t>>& out, int32_t k = -1,
               float threshold = 0.0f) const;

  // predict in two steps, for callers that ask several questions of one
  // text: embed writes the text's hidden vector (dim() floats) and returns
  // false when the text has no usable token; classify ranks the labels of a
  // hidden vector exactly as predict(text, out, k, threshold) would.
  bool embed(std::string_view text, float* hidden) const;
  void classify(const float* hidden, std::vector<std::pair<float, int32_t>>& out, int32_t k = -1,
                float threshold = 0.0f) const;
  // A threshold for predict/classify that returns at least every label whose
  // probability (as returned) exceeds p: below p by the 1e-5 fastText adds
  // inside its logs, and for hierarchical softmax by what that can add along
  // the deepest path of the tree, whose search prunes on partial scores.
  // Asking for only these labels skips most of the tree search.
  float threshold_below(float p) const;

  int32_t num_labels() const;
  const std::string& label(int32_t i) const;      // "__label__en"
  int32_t label_id(std::string_view label) const;  // -1 if absent
  int32_t dim() const;
  bool quantized() const;

  struct Impl;

 private:
  std::unique_ptr<const Impl> impl_;
};

}  // namespace claw::curate
