#include "claw/cli/inspect_dataset_command.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/data/indexed_dataset.h"

namespace claw::cli {
namespace {

struct InspectArgs {
  std::string prefix;
  int64_t documents = 3;  // -1: all
  int64_t tokens = 16;    // per document; -1: all
};

void print_document(const data::IndexedDataset& d, int64_t doc, int64_t max_tokens) {
  const int64_t first = d.document_index(doc), end = d.document_index(doc + 1);
  int64_t total = 0;
  for (int64_t s = first; s < end; ++s) total += d.sequence_length(s);
  std::string ids;
  int64_t shown = 0;
  std::vector<int32_t> buf;
  for (int64_t s = first; s < end && (max_tokens < 0 || shown < max_tokens); ++s) {
    const int64_t len = d.sequence_length(s);
    const int64_t take = max_tokens < 0 ? len : std::min(len, max_tokens - shown);
    buf.resize(static_cast<size_t>(take));
    d.read_tokens(s, 0, take, buf.data());
    if (s > first) ids += " |";
    for (int32_t t : buf) ids += fmt::format(" {}", t);
    shown += take;
  }
  fmt::print("document {}: {} sequences, {} tokens:{}{}\n", doc, end - first, total, ids,
             shown < total ? fmt::format(" ... (+{} more)", total - shown) : "");
}

void run(const InspectArgs& a) {
  if (a.documents < -1) fail("--documents {} is invalid; give a count, or -1 for all", a.documents);
  if (a.tokens < -1) fail("--tokens {} is invalid; give a count, or -1 for all", a.tokens);
  const data::IndexedDataset d(a.prefix);
  fmt::print("prefix: {}\ndtype: {}\nsequences: {}\ndocuments: {}\ntokens: {}\n", d.prefix(),
             data::index_dtype_name(d.dtype()), d.num_sequences(), d.num_documents(), d.total_tokens());
  if (!data::index_dtype_is_integer(d.dtype())) return;  // not token ids: nothing more to show
  const data::TokenRange r = d.token_range(0, d.num_sequences());
  if (r.min_sequence >= 0) fmt::print("token_range: {} {}\n", r.min, r.max);
  const int64_t n = a.documents < 0 ? d.num_documents() : std::min(a.documents, d.num_documents());
  for (int64_t doc = 0; doc < n; ++doc) print_document(d, doc, a.tokens);
}

}  // namespace

void add_inspect_dataset_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect-dataset",
                                     "check a Megatron .bin/.idx dataset and print its counts and first documents");
  sub->add_option("prefix", args->prefix, "dataset path without .bin/.idx")->required();
  sub->add_option("--documents", args->documents, "documents to print (-1: all)")->default_str("3");
  sub->add_option("--tokens", args->tokens, "token ids to print per document (-1: all)")->default_str("16");
  sub->callback([args] { run(*args); });
}

}  // namespace claw::cli
