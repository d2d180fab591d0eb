// The heuristic quality filters of `claw curate`: streaming stages that keep
// or remove a document with the same decisions, reasons and defaults as
// datatrove 0.10.1's filters (datatrove/pipeline/filters/*.py), which they
// transcribe. Words are datatrove's split_into_words for English (spaCy's
// tokenizer, reproduced in text_stats.h); lengths are in code points.
//
// Keys are datatrove's parameter names. A threshold that datatrove tests for
// truth (`if self.min_doc_words and ...`) is off when set to false or 0, as
// None or 0 switch it off there. `language` must be "en" (the only word
// tokenizer implemented).
//
//   gopher_quality     GopherQualityFilter (Gopher, Rae et al. 2021, A.1.1):
//     min_doc_words = 50, max_doc_words = 100000 (words with a character
//     outside PUNCTUATION_SET), min_avg_word_length = 3,
//     max_avg_word_length = 10, max_symbol_word_ratio = 0.1 ('#', and "..."
//     plus '…', per word), max_bullet_lines_ratio = 0.9,
//     max_ellipsis_lines_ratio = 0.3, max_non_alpha_words_ratio = 0.8 (the
//     least fraction of words with a letter), min_stop_words = 2,
//     stop_words = ["the", "be", "to", "of", "and", "that", "have", "with"].
//     Reasons gopher_short_doc, gopher_long_doc, gopher_below_avg_threshold,
//     gopher_above_avg_threshold, gopher_too_many_hashes,
//     gopher_too_many_ellipsis, gopher_too_many_bullets,
//     gopher_too_many_end_ellipsis, gopher_below_alpha_threshold,
//     gopher_enough_stop_words.
//   gopher_repetition  GopherRepetitionFilter (Gopher table A1):
//     dup_line_frac = 0.3, dup_para_frac = 0.3, dup_line_char_frac = 0.2,
//     dup_para_char_frac = 0.2, top_n_grams = [[2, 0.2], [3, 0.18], [4, 0.16]],
//     dup_n_grams = [[5, 0.15], [6, 0.14], [7, 0.13], [8, 0.12], [9, 0.11],
//     [10, 0.1]] ([n, fraction] pairs, datatrove's tuples). Reasons empty, dup_para_frac, dup_para_char_frac,
//     dup_line_frac, dup_line_char_frac, top_<n>_gram, duplicated_<n>_n_grams.
//   c4_quality         C4QualityFilter (Raffel et al. 2020): split_paragraph
//     = true, remove_citations = true, filter_no_terminal_punct = true,
//     min_num_sentences = 5, min_words_per_line = 3, max_word_length = 1000
//     (-1 switches each of the three off), filter_lorem_ipsum,
//     filter_javascript, filter_curly_bracket, filter_policy = true. Like
//     datatrove it rewrites a kept document's text to its kept lines.
//     Reasons lorem_ipsum, curly_bracket, too_few_sentences; line figures
//     go to the counters under datatrove's names (line-kept,
//     line-filter-javascript, ...). datatrove's C4BadWordsFilter is not
//     implemented: its word lists are downloaded at run time.
//   fineweb_quality    FineWebQualityFilter: line_punct_thr = 0.12,
//     line_punct_exclude_zero = false, stop_chars = TERMINAL_PUNCTUATION,
//     short_line_thr = 0.67, short_line_length = 30, char_duplicates_ratio =
//     0.01, new_line_ratio = 0.3. Reasons empty, line_punct_ratio,
//     short_line_ratio, char_dup_ratio, list_ratio.
//
// A removal adds its reason to the stage's counters.
//
// Where datatrove raises (ZeroDivisionError on a document without words when
// the checks that would remove it first are switched off), these stages
// remove the document: gopher_quality as gopher_short_doc.
//
// Thread-safety: process() is const and keeps its scratch on the stack.
#pragma once

#include <memory>

#include "claw/curate/stage.h"

namespace claw::curate {

std::unique_ptr<Stage> make_gopher_quality(StageKeys& keys);     // kind "gopher_quality"
std::unique_ptr<Stage> make_gopher_repetition(StageKeys& keys);  // kind "gopher_repetition"
std::unique_ptr<Stage> make_c4_quality(StageKeys& keys);         // kind "c4_quality"
std::unique_ptr<Stage> make_fineweb_quality(StageKeys& keys);    // kind "fineweb_quality"

}  // namespace claw::curate
