"""Cross-checks claw's indexed datasets against Megatron-Core's format logic,
reimplemented here with numpy from the format description
(megatron/core/datasets/indexed_dataset.py: _IndexWriter, _IndexReader,
IndexedDatasetBuilder), independently of claw's C++ reader and writer.

  megatron_format.py claw-writes CLAW   `claw preprocess` output read the way
      Megatron reads it (np.memmap, the same offsets); every document decodes
      (GPT-2 byte alphabet) to exactly its JSONL text plus <|endoftext|>, and
      Megatron's writer fed the same tokens writes byte-identical files.
  megatron_format.py claw-reads CLAW    datasets written by Megatron's writer
      logic (uint16 and int32, documents of several or no sequences) are read
      by `claw inspect-dataset` with every count and token as written.

Run with /usr/bin/python3 (Debian's numpy). The GPT-2 files come from
$CLAW_DATA_DIR/gpt2 (scripts/fetch-data).
"""

import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

INDEX_HEADER = b"MMIDIDX\x00\x00"
# Megatron's DType enum: code -> numpy type.
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
          8: np.uint16}
CODES = {np.dtype(t): c for c, t in DTYPES.items()}


def optimal_dtype(vocab_size):
    """Megatron's DType.optimal_dtype."""
    return np.uint16 if vocab_size < 65500 else np.int32


class MegatronReader:
    """Megatron's _IndexReader + _MMapBinReader logic."""

    def __init__(self, prefix):
        idx_path = prefix + ".idx"
        with open(idx_path, "rb") as stream:
            assert stream.read(9) == INDEX_HEADER, f"bad header: {idx_path}"
            (version,) = struct.unpack("<Q", stream.read(8))
            assert version == 1, f"bad version {version}: {idx_path}"
            (code,) = struct.unpack("<B", stream.read(1))
            self.dtype = DTYPES[code]
            (self.sequence_count,) = struct.unpack("<Q", stream.read(8))
            (self.document_count,) = struct.unpack("<Q", stream.read(8))
            offset = stream.tell()
        self.idx_buffer = np.memmap(idx_path, mode="r", order="C")
        self.sequence_lengths = np.frombuffer(self.idx_buffer, dtype=np.int32, count=self.sequence_count,
                                              offset=offset)
        self.sequence_pointers = np.frombuffer(self.idx_buffer, dtype=np.int64, count=self.sequence_count,
                                               offset=offset + self.sequence_lengths.nbytes)
        self.document_indices = np.frombuffer(
            self.idx_buffer, dtype=np.int64, count=self.document_count,
            offset=offset + self.sequence_lengths.nbytes + self.sequence_pointers.nbytes)
        end = offset + self.sequence_lengths.nbytes + self.sequence_pointers.nbytes + self.document_indices.nbytes
        assert end == len(self.idx_buffer), f"{idx_path}: {len(self.idx_buffer)} bytes, the fields take {end}"
        # IndexedDataset.__init__'s consistency checks.
        assert self.sequence_lengths.shape[0] == self.document_indices[-1]
        assert self.sequence_lengths.shape[0] == self.sequence_count
        self.bin_buffer = np.memmap(prefix + ".bin", mode="r", order="C")

    def sequence(self, i):
        return np.frombuffer(self.bin_buffer, dtype=self.dtype, count=int(self.sequence_lengths[i]),
                             offset=int(self.sequence_pointers[i]))

    def document(self, d):
        """The sequences of document d."""
        return [self.sequence(i) for i in range(self.document_indices[d], self.document_indices[d + 1])]


def write_megatron(prefix, documents, dtype):
    """Megatron's IndexedDatasetBuilder.add_document + finalize (_IndexWriter).
    documents: a list of documents, each a list of sequences of token ids."""
    sequence_lengths, document_indices = [], [0]
    with open(prefix + ".bin", "wb") as data:
        for doc in documents:
            tokens = [t for seq in doc for t in seq]
            data.write(np.array(tokens, dtype=dtype).tobytes(order="C"))
            sequence_lengths.extend(len(seq) for seq in doc)
            document_indices.append(len(sequence_lengths))
    itemsize = np.int64(np.dtype(dtype).itemsize)
    pointers, ptr = [], np.int64(0)
    for length in sequence_lengths:
        pointers.append(ptr.item())
        ptr += length * itemsize
    with open(prefix + ".idx", "wb") as idx:
        idx.write(INDEX_HEADER)
        idx.write(struct.pack("<Q", 1))
        idx.write(struct.pack("<B", CODES[np.dtype(dtype)]))
        idx.write(struct.pack("<Q", len(sequence_lengths)))
        idx.write(struct.pack("<Q", len(document_indices)))
        idx.write(np.array(sequence_lengths, dtype=np.int32).tobytes(order="C"))
        idx.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
        idx.write(np.array(document_indices, dtype=np.int64).tobytes(order="C"))


def gpt2_decoder(encoder_json):
    """id -> bytes through GPT-2's byte alphabet: the 188 printable Latin-1
    bytes stand for themselves, the other 68 are U+0100.. in byte order."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    char_to_byte, extra = {}, 0
    for b in range(256):
        if b in printable:
            char_to_byte[chr(b)] = b
        else:
            char_to_byte[chr(256 + extra)] = b
            extra += 1
    with open(encoder_json, encoding="utf-8") as f:
        encoder = json.load(f)
    return {i: bytes(char_to_byte[c] for c in token) for token, i in encoder.items()}


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


# Documents for the preprocess check: prose, code, CJK, emoji, whitespace
# runs, the special token as text, lists of sentences, empty texts.
RECORDS = [
    {"text": "Hello world, this is a test.", "title": "greeting"},
    {"text": "def f(x):\n    return x  # tabs\t\tand   spaces\n\n\n", "title": "code"},
    {"text": "中文文本，日本語のテキスト、한국어 텍스트. Emoji: 😀👍🏽 ñ é ü", "title": "unicode"},
    {"text": "A literal <|endoftext|> stays text.", "title": "special"},
    {"text": ["First sentence. ", "", "Third one!"], "title": ["t1", "t2"]},
    {"text": "", "title": "empty text"},
    {"text": [], "title": ""},
    {"text": " " * 100 + "end", "title": "spaces"},
]


def claw_writes(claw):
    data_dir = os.environ.get("CLAW_DATA_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "data")
    gpt2 = os.path.join(data_dir, "gpt2")
    decode = gpt2_decoder(os.path.join(gpt2, "encoder.json"))
    eod = 50256
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.jsonl")
        with open(corpus, "w", encoding="utf-8") as f:
            for i in range(60):  # enough lines for several chunks of work
                for r in RECORDS:
                    f.write(json.dumps(dict(r, id=i), ensure_ascii=i % 2 == 0) + "\n")
        out = os.path.join(tmp, "out")
        run([claw, "preprocess", "--input", corpus, "--output-prefix", out, "--json-keys", "text", "title",
             "--vocab-file", os.path.join(gpt2, "encoder.json"), "--merge-file", os.path.join(gpt2, "vocab.bpe"),
             "--append-eod", "--workers", "2"])
        for key in ("text", "title"):
            prefix = f"{out}_{key}_document"
            reader = MegatronReader(prefix)
            assert reader.dtype == optimal_dtype(len(decode)), f"{prefix}: dtype {reader.dtype}"
            assert reader.document_count == 60 * len(RECORDS) + 1
            sequences = 0
            for d in range(reader.document_count - 1):
                value = RECORDS[d % len(RECORDS)][key]
                texts = [t for t in (value if isinstance(value, list) else [value]) if t]
                expected = [t.encode("utf-8") for t in texts]
                if expected:
                    expected[-1] += b"<|endoftext|>"
                got = [b"".join(decode[int(t)] for t in seq) for seq in reader.document(d)]
                assert got == expected, f"{prefix} document {d}: {got!r} != {expected!r}"
                for seq in reader.document(d)[-1:]:
                    assert int(seq[-1]) == eod and eod not in seq[:-1].tolist(), f"document {d}: eod misplaced"
                sequences += len(got)
            # Megatron's writer fed the same documents writes the same bytes.
            documents = [[seq.tolist() for seq in reader.document(d)] for d in range(reader.document_count - 1)]
            again = os.path.join(tmp, f"megatron_{key}")
            write_megatron(again, documents, reader.dtype)
            for ext in (".bin", ".idx"):
                with open(prefix + ext, "rb") as a, open(again + ext, "rb") as b:
                    assert a.read() == b.read(), f"{prefix}{ext} differs from Megatron's writer"
            print(f"ok: {prefix}: {reader.document_count - 1} documents, {sequences} sequences, "
                  f"{int(reader.sequence_lengths.sum())} tokens ({np.dtype(reader.dtype).name}) decode to the "
                  f"JSONL text; Megatron's writer gives identical .bin/.idx")


def claw_reads(claw):
    rng = np.random.default_rng(1234)
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, high in ((np.uint16, 65536), (np.int32, 100277)):
            documents = []
            for d in range(40):
                n_seq = [1, 1, 2, 0, 3][d % 5]  # several, and documents without sequences
                documents.append([rng.integers(0, high, size=int(rng.integers(0, 50))).tolist()
                                  for _ in range(n_seq)])
            documents[1] = [[0, high - 1]]  # the extremes of the vocabulary
            prefix = os.path.join(tmp, f"outside_{np.dtype(dtype).name}")
            write_megatron(prefix, documents, dtype)
            out = run([claw, "inspect-dataset", prefix, "--documents", "-1", "--tokens", "-1"])
            fields = dict(re.findall(r"^(\w+): (.*)$", out, re.M))
            total = sum(len(s) for doc in documents for s in doc)
            expect = {"dtype": {np.uint16: "u16", np.int32: "i32"}[dtype], "documents": str(len(documents)),
                      "sequences": str(sum(len(doc) for doc in documents)), "tokens": str(total)}
            for k, v in expect.items():
                assert fields.get(k) == v, f"{prefix}: claw says {k}: {fields.get(k)}, Megatron's writer wrote {v}"
            lines = re.findall(r"^document (\d+): (\d+) sequences, (\d+) tokens:(.*)$", out, re.M)
            assert len(lines) == len(documents), out
            for d, n_seq, n_tok, ids in lines:
                doc = documents[int(d)]
                got = [[int(t) for t in part.split()] for part in ids.split("|")] if doc else []
                assert int(n_seq) == len(doc) and int(n_tok) == sum(len(s) for s in doc), f"document {d}"
                assert got == doc, f"{prefix} document {d}: claw read {got}, Megatron's writer wrote {doc}"
            print(f"ok: claw reads {prefix}: {len(documents)} documents, {total} tokens ({np.dtype(dtype).name})")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("claw-writes", "claw-reads"):
        sys.exit(__doc__)
    {"claw-writes": claw_writes, "claw-reads": claw_reads}[sys.argv[1]](sys.argv[2])
