// FastTextModel against libfasttext (Debian's fastText 0.9.2): tiny
// supervised models trained here with its C++ API (softmax, hs, ova; dense
// and quantized, pruned, quantized output), and fastText's lid.176.ftz when
// the data directory has it. Labels must agree in order and probabilities to
// 1e-5 relative (1e-7 absolute); the tests also report how many agree bit
// for bit, and the speed of both on 2000 texts.
#include <fasttext/fasttext.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/data/builtin_corpus.h"
#include "claw/curate/fasttext_model.h"
#include "claw/data/file_io.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::curate {

using data::default_data_dir;
using data::read_file;
namespace {

using claw::testing::TempDir;

// The built-in data (CLAW_DATA_DIR, else the build's data directory).
std::string data_dir() { return default_data_dir(); }

// What fastText's Python model.predict(text) does (and datatrove's language
// filter, newlines first made spaces): predictLine on the text and a newline.
std::vector<std::pair<float, std::string>> reference(const fasttext::FastText& ft, const std::string& text) {
  std::string line = text;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::istringstream in(line + "\n");
  std::vector<std::pair<float, std::string>> out;
  ft.predictLine(in, out, -1, 0.0);
  return out;
}

struct Agreement {
  int64_t texts = 0, predictions = 0, bit_exact = 0;
  double max_rel = 0;
};

void compare(const FastTextModel& mine, const fasttext::FastText& ft, const std::vector<std::string>& texts,
             Agreement& a, const std::string& what) {
  std::vector<std::pair<float, int32_t>> got;
  for (size_t t = 0; t < texts.size(); ++t) {
    const auto want = reference(ft, texts[t]);
    mine.predict(texts[t], got);
    ++a.texts;
    ASSERT_EQ(got.size(), want.size()) << what << " text " << t << ": \"" << texts[t].substr(0, 200) << "\"";
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(mine.label(got[i].second), want[i].second)
          << what << " text " << t << " rank " << i << " (p " << got[i].first << " vs " << want[i].first << "): \""
          << texts[t].substr(0, 200) << "\"";
      const double diff = std::abs(double(got[i].first) - double(want[i].first));
      EXPECT_LE(diff, std::max(1e-7, 1e-5 * std::abs(double(want[i].first))))
          << what << " text " << t << " rank " << i << ": " << got[i].first << " vs " << want[i].first;
      if (want[i].first != 0) a.max_rel = std::max(a.max_rel, diff / std::abs(double(want[i].first)));
      a.bit_exact += std::memcmp(&got[i].first, &want[i].first, sizeof(float)) == 0;
      ++a.predictions;
    }
    // embed + classify with threshold_below(t) returns every label above t
    // with the same probability (the language stage asks only for those).
    std::vector<float> hidden(mine.dim());
    if (!mine.embed(texts[t], hidden.data())) {
      EXPECT_TRUE(got.empty()) << what << " text " << t;
      continue;
    }
    std::vector<std::pair<float, int32_t>> above;
    for (float th : {0.001f, 0.05f, 0.3f, 0.65f, 0.95f}) {
      mine.classify(hidden.data(), above, -1, mine.threshold_below(th));
      size_t n = 0;
      while (n < got.size() && got[n].first > th) ++n;
      ASSERT_GE(above.size(), n) << what << " text " << t << " threshold " << th;
      // Equal probabilities may come out in another order (the heap holds
      // other labels): compare each rank's probability, and the labels as sets.
      std::vector<std::pair<float, int32_t>> a(above.begin(), above.begin() + n), b(got.begin(), got.begin() + n);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(a[i].first, b[i].first) << what << " text " << t << " rank " << i;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_TRUE(a == b) << what << " text " << t << " threshold " << th;
    }
  }
}

void report(const Agreement& a, const std::string& what) {
  std::printf("[ fasttext ] %-28s %lld texts, %lld predictions, %lld bit-exact, max rel diff %.3g\n", what.c_str(),
              (long long)a.texts, (long long)a.predictions, (long long)a.bit_exact, a.max_rel);
}

// Words of a made-up language per label, some with multi-byte characters.
std::string make_word(std::mt19937& rng, int flavour) {
  static const std::vector<std::string> syll = {"ka", "lo", "mi", "tu", "re", "sa", "no", "vi", "é", "ü", "ß",
                                                "ch", "中", "文", "ж", "ы", "ø", "qu", "x", "👍"};
  std::string w;
  const int n = 1 + int(rng() % 4);
  for (int i = 0; i < n; ++i) w += syll[(flavour * 7 + rng() % 6 + i * 3) % syll.size()];
  return w;
}

struct Corpus {
  std::string train;                // "__label__X words..." lines
  std::vector<std::string> texts;  // texts to predict
};

Corpus make_corpus(int nlabels, int lines, uint32_t seed) {
  std::mt19937 rng(seed);
  Corpus c;
  std::vector<std::string> vocab;
  for (int i = 0; i < 400; ++i) vocab.push_back(make_word(rng, i % 11));
  for (int l = 0; l < lines; ++l) {
    const int label = int(rng() % nlabels);
    std::string line = "__label__c" + std::to_string(label);
    const int n = 3 + int(rng() % 12);
    for (int i = 0; i < n; ++i) line += " " + vocab[(label * 37 + rng() % 40 + (rng() % 5 == 0 ? rng() % 400 : 0)) % vocab.size()];
    c.train += line + "\n";
  }
  // Texts: known and unknown words, labels, "</s>", every kind of white
  // space, empty and blank texts.
  const std::vector<std::string> seps = {" ", "  ", "\t", "\n", "\r\n", "\v", "\f", std::string(1, '\0')};
  c.texts = {"", " ", "\n", "__label__c1", "</s>", "a </s> b", "__label__c0 " + vocab[3], "ka </s>", "中文 ж"};
  for (int t = 0; t < 300; ++t) {
    std::string s;
    const int n = 1 + int(rng() % 30);
    for (int i = 0; i < n; ++i) {
      if (i) s += seps[rng() % 16 < 12 ? 0 : rng() % seps.size()];
      const int kind = int(rng() % 10);
      if (kind < 6) s += vocab[rng() % vocab.size()];
      else if (kind < 8) s += make_word(rng, int(rng() % 50)) + make_word(rng, int(rng() % 50));
      else if (kind == 8) s += rng() % 2 ? "__label__c" + std::to_string(rng() % (nlabels + 2)) : "__label__zz";
      else s += rng() % 3 ? "Hello," : "</s>";
    }
    c.texts.push_back(s);
  }
  return c;
}

std::string train(const TempDir& dir, const std::string& name, const Corpus& c, fasttext::loss_name loss,
                  int dim, fasttext::FastText& ft) {
  const std::string input = dir.write(name + ".txt", c.train);
  fasttext::Args a;
  a.input = input;
  a.output = dir / name;
  a.model = fasttext::model_name::sup;
  a.loss = loss;
  a.wordNgrams = 2;
  a.minn = 2;
  a.maxn = 4;
  a.dim = dim;
  a.bucket = 20000;
  a.epoch = 20;
  a.lr = 0.5;
  a.minCount = 1;
  a.thread = 1;
  a.verbose = 0;
  ft.train(a);
  const std::string path = dir / (name + ".bin");
  ft.saveModel(path);
  return path;
}

std::string quantize(const TempDir& dir, const std::string& name, fasttext::FastText& ft, bool qout, size_t cutoff) {
  fasttext::Args q;
  q.input = dir / (name + ".txt");
  q.output = dir / name;
  q.qout = qout;
  q.qnorm = true;
  q.cutoff = cutoff;
  q.retrain = false;
  q.dsub = 2;
  q.verbose = 0;
  q.thread = 1;
  ft.quantize(q);
  const std::string path = dir / (name + ".ftz");
  ft.saveModel(path);
  return path;
}

void check(const std::string& path, const std::vector<std::string>& texts, const std::string& what) {
  fasttext::FastText ref;
  ref.loadModel(path);
  const FastTextModel mine(path);
  Agreement a;
  compare(mine, ref, texts, a, what);
  report(a, what);
}

TEST(FastTextModel, SoftmaxDenseAndQuantizedPruned) {
  TempDir dir;
  const Corpus c = make_corpus(6, 400, 1);
  fasttext::FastText ft;
  const std::string bin = train(dir, "softmax", c, fasttext::loss_name::softmax, 15, ft);  // dim 15: last sub-quantizer of 1
  check(bin, c.texts, "softmax .bin");
  const std::string ftz = quantize(dir, "softmax", ft, /*qout=*/false, /*cutoff=*/1000);
  check(ftz, c.texts, "softmax .ftz cutoff 1000");
  const FastTextModel m(ftz);
  EXPECT_TRUE(m.quantized());
  EXPECT_EQ(m.num_labels(), 6);
  EXPECT_EQ(m.label(m.label_id("__label__c3")), "__label__c3");
  EXPECT_EQ(m.label_id("__label__nope"), -1);
  EXPECT_EQ(m.label_id("ka"), -1);  // a word, or nothing: not a label
}

TEST(FastTextModel, HierarchicalSoftmaxWithQuantizedOutput) {
  TempDir dir;
  const Corpus c = make_corpus(300, 1500, 2);  // quantizing the output needs >= 256 labels
  fasttext::FastText ft;
  const std::string bin = train(dir, "hs", c, fasttext::loss_name::hs, 16, ft);
  check(bin, c.texts, "hs .bin");
  const std::string ftz = quantize(dir, "hs", ft, /*qout=*/true, /*cutoff=*/0);
  check(ftz, c.texts, "hs .ftz qout");
}

TEST(FastTextModel, OneVsAll) {
  TempDir dir;
  const Corpus c = make_corpus(5, 300, 3);
  fasttext::FastText ft;
  check(train(dir, "ova", c, fasttext::loss_name::ova, 10, ft), c.texts, "ova .bin");
}

TEST(FastTextModel, BadFilesNameTheFile) {
  TempDir dir;
  EXPECT_CLAW_ERROR(FastTextModel(dir / "absent.bin"), dir / "absent.bin", "cannot be opened");
  const std::string junk = dir.write("junk.bin", "this is not a model at all");
  EXPECT_CLAW_ERROR(FastTextModel{junk}, junk, "not a fastText model");
  const Corpus c = make_corpus(3, 100, 4);
  fasttext::FastText ft;
  const std::string bin = train(dir, "small", c, fasttext::loss_name::softmax, 8, ft);
  std::ifstream in(bin, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cut = dir.write("cut.bin", bytes.substr(0, bytes.size() / 2));
  EXPECT_CLAW_ERROR(FastTextModel{cut}, cut, "truncated");
  std::string sg = bytes;
  const int32_t kind = 2;  // model = skipgram
  std::memcpy(sg.data() + 8 + 7 * 4, &kind, 4);
  const std::string sg_path = dir.write("sg.bin", sg);
  EXPECT_CLAW_ERROR(FastTextModel{sg_path}, sg_path, "skipgram", "supervised");
}

// The State of the Union speeches as scripts/fetch-data unpacks them
// (data/sotu.jsonl holds the same texts but is made only when a command
// first needs the corpus).
std::vector<std::string> sotu_texts() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir() + "/sotu", ec))
    if (e.path().extension() == ".txt") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<std::string> docs;
  for (const std::string& f : files) docs.push_back(read_file(f, "speech"));
  return docs;
}

// 2000-byte pieces of the speeches, cut at spaces, and whole speeches.
std::vector<std::string> pieces(const std::vector<std::string>& docs, size_t count, size_t bytes) {
  std::vector<std::string> out;
  for (size_t d = 0; out.size() < count && !docs.empty(); d = (d + 1) % docs.size()) {
    const std::string& s = docs[d];
    const size_t at = (out.size() * 7919 * bytes) % std::max<size_t>(1, s.size());
    size_t b = s.find(' ', at), e = b == std::string::npos ? b : s.find(' ', std::min(s.size(), b + bytes));
    if (b == std::string::npos) b = 0;
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
  }
  return out;
}

const std::vector<std::string> kMultilingual = {
    "The quick brown fox jumps over the lazy dog.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "La volpe marrone veloce salta sopra il cane pigro.",
    "A rápida raposa marrom pula sobre o cão preguiçoso.",
    "De snelle bruine vos springt over de luie hond.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "Швидка бура лисиця стрибає через ледачого пса.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "השועל החום המהיר קופץ מעל הכלב העצלן.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "দ্রুত বাদামী শিয়াল অলস কুকুরের উপর দিয়ে লাফ দেয়।",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.",
    "Szybki brązowy lis przeskakuje nad leniwym psem.",
    "Rychlá hnědá liška skáče přes líného psa.",
    "A gyors barna róka átugrik a lusta kutyán.",
    "Nopea ruskea kettu hyppää laiskan koiran yli.",
    "Den snabba bruna räven hoppar över den lata hunden.",
    "Con cáo nâu nhanh nhẹn nhảy qua con chó lười.",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
    "Rubah coklat yang cepat melompati anjing yang malas.",
    "Mbweha mwepesi wa kahawia anaruka juu ya mbwa mvivu.",
    "Ang mabilis na kayumangging soro ay tumalon sa tamad na aso.",
    "Y llwynog brown cyflym yn neidio dros y ci diog.",
    "An sionnach donn gasta ag léim thar an madra leisciúil.",
    "Հարևանը արագ շագանակագույն աղվեսը ցատկում է ծույլ շան վրայով։",
    "სწრაფი ყავისფერი მელა ხტება ზარმაც ძაღლზე.",
    "Ιδού", "ok", "12345", "   ", "", "\n\n", "😀 🎉 👍",
    "Esperanto estas internacia lingvo.", "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
};

TEST(FastTextModel, Lid176MatchesLibfasttext) {
  const std::string path = data_dir() + "/lid/lid.176.ftz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch-data)";
  const auto docs = sotu_texts();
  ASSERT_FALSE(docs.empty()) << "no speeches in " << data_dir() << "/sotu (scripts/fetch-data)";
  std::vector<std::string> texts = pieces(docs, 300, 300);
  for (size_t d = 0; d < docs.size() && d < 40; ++d) texts.push_back(docs[d * docs.size() / 40]);
  texts.insert(texts.end(), kMultilingual.begin(), kMultilingual.end());
  for (const auto& s : kMultilingual) texts.push_back(s + " " + kMultilingual[(&s - kMultilingual.data()) * 7 % kMultilingual.size()]);
  check(path, texts, "lid.176.ftz");
}

TEST(FastTextModel, Lid176Speed) {
  const std::string path = data_dir() + "/lid/lid.176.ftz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch-data)";
  const auto texts = pieces(sotu_texts(), 2000, 2000);
  ASSERT_FALSE(texts.empty()) << "no speeches in " << data_dir() << "/sotu (scripts/fetch-data)";
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  fasttext::FastText ref;
  ref.loadModel(path);
  const FastTextModel mine(path);
  using clock = std::chrono::steady_clock;
  double sink = 0;
  auto time = [&](auto&& fn) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = clock::now();
      for (const auto& t : texts) sink += fn(t);
      best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    }
    return best;
  };
  const double t_ref = time([&](const std::string& t) { return reference(ref, t)[0].first; });
  std::vector<std::pair<float, int32_t>> out;
  const double t_mine = time([&](const std::string& t) {
    mine.predict(t, out);
    return out[0].first;
  });
  std::vector<float> hidden(mine.dim());
  const double t_embed = time([&](const std::string& t) { return mine.embed(t, hidden.data()) ? hidden[0] : 0.0f; });
  std::printf("[ fasttext ] lid.176 on %zu texts (%.1f KB mean), one thread: libfasttext %.0f docs/s (%.1f MB/s), "
              "FastTextModel %.0f docs/s (%.1f MB/s): %.1fx; of its time the hidden vector %.0f%%\n",
              texts.size(), bytes / 1e3 / texts.size(), texts.size() / t_ref, bytes / 1e6 / t_ref,
              texts.size() / t_mine, bytes / 1e6 / t_mine, t_ref / t_mine, 100 * t_embed / t_mine);
  EXPECT_GT(sink, 0);
}

}  // namespace
}  // namespace claw::curate
