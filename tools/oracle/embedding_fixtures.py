#!/usr/bin/env python3
"""Oracle fixtures of switchyard's embedding engines (tests/embed), from sentence-transformers and transformers.

    python3 tools/oracle/embedding_fixtures.py minilm --model "$SY_MINILM_DIR" --out tests/fixtures/embeddings

    python3 tools/oracle/embedding_fixtures.py tiny --out tests/fixtures/hf --llama-cpp LLAMA_CPP_SOURCE

minilm: all-MiniLM-L6-v2 as sentence-transformers runs it (its max_seq_length 256, mean pooling, Normalize) on 128
sentences (English, accents, Greek, Cyrillic, CJK, Arabic, Hindi, emoji, code, and long ones past 256 tokens):
minilm-st.json.zst = {"oracle": versions, "max_seq_length": 256, "dim": 384, "cases": [{"text", "ids": the
tokens sentence-transformers fed (after its truncation), "vector": [384 floats]}]}.
"""
import argparse
import json
import os
import random
import sys

import zstandard

BASE = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "The cat sits outside.",
    "The new movie is awesome.", "The new movie is so great!", "How do I reset my password?",
    "What is the capital of France?", "Paris is the capital and most populous city of France.",
    "Berlin is the capital of Germany.", "Embeddings map text to vectors.",
    "switchyard serves local language models over OpenAI and Ollama APIs.",
    "Café au lait, crème brûlée and a croissant, s'il vous plaît.", "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "¿Dónde está la biblioteca? Está cerca de la estación.", "Ελληνικά: η γρήγορη καφέ αλεπού.",
    "Русский язык: быстрая коричневая лиса прыгает.", "我爱自然语言处理。", "東京は日本の首都です。",
    "서울은 한국의 수도입니다.", "القاهرة هي عاصمة مصر.", "दिल्ली भारत की राजधानी है।", "Hà Nội là thủ đô của Việt Nam.",
    "I love pizza 🍕 and tacos 🌮!", "def add(a, b): return a + b  # adds two numbers",
    "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;", "https://example.com/path?query=1&b=2",
    "The temperature is -3.5°C; humidity 87%.", "e = mc²; ∑ x_i ≥ 0", "naïve coöperation façade jalapeño",
    "ALL CAPS SENTENCE WITH SHOUTING", "mixed CaSe WoRdS", "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\nhere", "[CLS] literal special tokens [SEP] inside", "a", ".", "??!!",
    "supercalifragilisticexpialidocious", "x" * 150, "Pneumonoultramicroscopicsilicovolcanoconiosis is a word.",
]
WORDS = ("the railway yard sorts freight cars onto tracks by destination while locomotives shunt them back and "
         "forth engineers signal each move carefully and the night shift keeps trains rolling through storms "
         "snow and heat café résumé naïve Zürich 東京 北京 москва").split()


def sentences():
    rng = random.Random(16)
    out = list(BASE)
    while len(out) < 112:
        n = rng.randint(3, 40)
        out.append(" ".join(rng.choice(WORDS) for _ in range(n)) + rng.choice([".", "!", "?", ""]))
    for k in range(16):  # long: past max_seq_length, so truncation is part of the oracle
        n = rng.randint(150, 600)
        out.append(" ".join(rng.choice(WORDS) for _ in range(n)))
    return out


def minilm(args):
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer
    torch.manual_seed(0)
    model = SentenceTransformer(args.model, device="cpu")
    texts = sentences()
    vecs = model.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    feats = model.tokenize(texts)
    cases = []
    for i, t in enumerate(texts):
        mask = feats["attention_mask"][i].tolist()
        ids = [x for x, m in zip(feats["input_ids"][i].tolist(), mask) if m]
        cases.append({"text": t, "ids": ids, "vector": [float("%.8g" % v) for v in vecs[i].tolist()]})
    doc = {"oracle": "sentence-transformers %s, torch %s" % (sentence_transformers.__version__, torch.__version__),
           "max_seq_length": model.max_seq_length, "dim": int(vecs.shape[1]), "cases": cases}
    write_zst(os.path.join(args.out, "minilm-st.json.zst"), doc)
    print("%d sentences, dim %d, longest %d tokens" % (len(cases), vecs.shape[1], max(len(c["ids"]) for c in cases)))


TINY_TEXT = ("The switchyard sorts freight cars onto tracks by destination. Locomotives shunt them back and forth, "
             "engineers signal each move, and the night shift keeps trains rolling through storms, snow and heat. "
             "Passengers wait on platform four for the express to the city; the café sells coffee and croissants.")
TINY_SENTENCES = ["The switchyard sorts freight cars.", "Locomotives shunt them back and forth!",
                  "Passengers wait on platform four.", "the night shift keeps trains rolling",
                  "Café coffee and croissants?", "storms snow and heat", "xyzzy unknown words qqq", "trains"]


def tiny(args):
    """Random-weight BERT encoders made by transformers' own classes, with a WordPiece tokenizer trained on a
    paragraph: bert-tiny-embed (BertModel + sentence-transformers CLS pooling and Normalize) and bert-tiny-rerank
    (BertForSequenceClassification, one label). expected.json: the token ids and the vectors / scores of
    transformers in float32; llama.cpp's converter writes each as model-f32.gguf beside it when --llama-cpp is
    given."""
    import subprocess
    import tempfile
    import tokenizers
    import torch
    import transformers
    from tokenizers import models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForSequenceClassification, BertModel, PreTrainedTokenizerFast

    tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator([TINY_TEXT] * 4, trainers.WordPieceTrainer(vocab_size=160, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    fast.do_lower_case = True
    vocab = tok.get_vocab_size()
    for name, rerank in (("bert-tiny-embed", False), ("bert-tiny-rerank", True)):
        torch.manual_seed(16 + rerank)
        cfg = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64, type_vocab_size=2, num_labels=1,
                         layer_norm_eps=1e-12, pad_token_id=0)
        model = (BertForSequenceClassification if rerank else BertModel)(cfg).eval()
        with torch.no_grad():  # visible norms and biases, as the chat fixtures do
            for n, p in model.named_parameters():
                if "LayerNorm.weight" in n:
                    p.copy_(1 + 0.2 * torch.randn_like(p))
                elif n.endswith("bias"):
                    p.copy_(0.2 * torch.randn_like(p))
                else:
                    p.copy_(0.15 * torch.randn_like(p))
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        fast.save_pretrained(out)
        for extra in ("vocab.txt", "special_tokens_map.json"):
            if os.path.exists(os.path.join(out, extra)):
                os.remove(os.path.join(out, extra))
        doc = {"format": 1, "model": name, "transformers_version": transformers.__version__,
               "torch_version": torch.__version__, "cases": []}
        if not rerank:
            os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
            json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                       {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                       {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
                      open(os.path.join(out, "modules.json"), "w"), indent=2)
            json.dump({"word_embedding_dimension": 32, "pooling_mode_cls_token": True,
                       "pooling_mode_mean_tokens": False}, open(os.path.join(out, "1_Pooling/config.json"), "w"))
            json.dump({"max_seq_length": 48, "do_lower_case": False},
                      open(os.path.join(out, "sentence_bert_config.json"), "w"))
            for t in TINY_SENTENCES:
                enc = fast(t, return_tensors="pt")
                with torch.no_grad():
                    h = model(**enc).last_hidden_state[0, 0]
                v = torch.nn.functional.normalize(h, dim=0)
                doc["cases"].append({"text": t, "ids": enc["input_ids"][0].tolist(),
                                     "vector": [float("%.9g" % x) for x in v.tolist()]})
        else:
            for i, q in enumerate(TINY_SENTENCES[:4]):
                for d in TINY_SENTENCES[4:]:
                    enc = fast(q, d, return_tensors="pt")
                    with torch.no_grad():
                        score = model(**enc).logits[0, 0].item()
                    doc["cases"].append({"query": q, "document": d, "ids": enc["input_ids"][0].tolist(),
                                         "types": enc["token_type_ids"][0].tolist(), "score": float("%.9g" % score)})
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
        write_bert_gguf(out, model, cfg, tok, rerank, os.path.join(out, "model-f32.gguf"))
        print(name, "written")


def qwen3(args):
    """qwen3-tiny-embed: a random-weight Qwen3Model (the bare network, as Qwen3-Embedding ships it) with
    sentence-transformers' lasttoken pooling and Normalize, and the qwen3-f32 fixture's byte-level BPE with
    <|endoftext|> appended by its post-processor (as Qwen3-Embedding's tokenizer appends it). expected.json: the
    ids and the normalized last hidden state of transformers, for plain texts and for a query with the
    instruction prefix ("Instruct: ...\nQuery:") Qwen3-Embedding asks of queries."""
    import shutil
    import torch
    import transformers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3Model
    src = os.path.join(os.path.dirname(args.out.rstrip("/")), "hf", "qwen3-f32") if not os.path.isdir(
        os.path.join(args.out, "qwen3-f32")) else os.path.join(args.out, "qwen3-f32")
    out = os.path.join(args.out, "qwen3-tiny-embed")
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    tj = json.load(open(os.path.join(src, "tokenizer.json")))
    tj["post_processor"] = {"type": "TemplateProcessing",
                            "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                                     {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
                            "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [500],
                                                                 "tokens": ["<|endoftext|>"]}}}
    json.dump(tj, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False)
    shutil.copy(os.path.join(src, "tokenizer_config.json"), os.path.join(out, "tokenizer_config.json"))
    cfg = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=500, eos_token_id=500,
                      pad_token_id=500)
    torch.manual_seed(3)
    model = Qwen3Model(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in n else 0.1 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
              open(os.path.join(out, "modules.json"), "w"), indent=2)
    json.dump({"word_embedding_dimension": 64, "pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False,
               "include_prompt": True}, open(os.path.join(out, "1_Pooling/config.json"), "w"))
    json.dump({"max_seq_length": 128, "do_lower_case": False}, open(os.path.join(out, "sentence_bert_config.json"), "w"))
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(out, "tokenizer.json"))
    texts = ["The switchyard moves trains", "What is 12 + 345?", "Locomotives shunt freight cars.",
             "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
             "Where do trains wait?"]
    doc = {"format": 1, "model": "qwen3-tiny-embed", "transformers_version": transformers.__version__,
           "torch_version": torch.__version__, "cases": []}
    for t in texts:
        ids = tok(t)["input_ids"]
        with torch.no_grad():
            h = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        v = torch.nn.functional.normalize(h, dim=0)
        doc["cases"].append({"text": t, "ids": ids, "vector": [float("%.9g" % x) for x in v.tolist()]})
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print("qwen3-tiny-embed written; ids", [c["ids"][-1] for c in doc["cases"]])


def write_bert_gguf(src, model, cfg, tok, rerank, path):
    """The checkpoint as llama.cpp's convert_hf_to_gguf.py writes a BERT (its converter refuses a tokenizer it has
    no hash for, so the same keys, tensor names, from gguf's own TensorNameMap, and phantom-space vocabulary are
    written here with the gguf package; checked against the converter's MiniLM output)."""
    import gguf
    import numpy as np
    w = gguf.GGUFWriter(path + ".tmp", "bert")
    w.add_name(os.path.basename(src))
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_layer_norm_eps(cfg.layer_norm_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.RANK if rerank else gguf.PoolingType.CLS)
    w.add_token_type_count(cfg.type_vocab_size)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    tokens = [t if t in specials else t[2:] if t.startswith("##") else "\u2581" + t for t, _ in vocab]
    types = [gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t, _ in vocab]
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types(types)
    ids = tok.get_vocab()
    w.add_bos_token_id(ids["[CLS]"])
    w.add_eos_token_id(ids["[SEP]"])
    w.add_unk_token_id(ids["[UNK]"])
    w.add_sep_token_id(ids["[SEP]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_mask_token_id(ids["[MASK]"])
    w.add_bool("tokenizer.ggml.normalizer.lowercase", True)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, cfg.num_hidden_layers)
    for n, p in model.state_dict().items():
        if n.endswith("position_ids"):
            continue
        base = n[5:] if n.startswith("bert.") else n
        if base.startswith("pooler.dense."):
            if not rerank:
                continue  # the converter drops an embedding model's pooler
            new = "cls." + base.split(".")[-1]
        elif base in ("classifier.weight", "classifier.bias"):
            new = "cls.output." + base.split(".")[-1]
        else:
            new = names.get_name(base, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise SystemExit(f"no GGUF name for {n}")
        w.add_tensor(new, p.detach().float().numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


def write_zst(path, doc):
    data = zstandard.ZstdCompressor(level=19).compress(json.dumps(doc, ensure_ascii=False).encode())
    with open(path + ".tmp", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("minilm")
    a.add_argument("--model", required=True)
    a.add_argument("--out", required=True)
    t = sub.add_parser("tiny")
    t.add_argument("--out", required=True)
    t.add_argument("--llama-cpp", help="llama.cpp's source folder, for its convert_hf_to_gguf.py")
    q = sub.add_parser("qwen3")
    q.add_argument("--out", required=True)
    args = ap.parse_args()
    {"minilm": minilm, "tiny": tiny, "qwen3": qwen3}[args.cmd](args)


if __name__ == "__main__":
    main()
