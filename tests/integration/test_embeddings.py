#!/usr/bin/env python3
"""Integration test of embeddings on `switchyard serve` with all-MiniLM-L6-v2 (SY_MINILM_DIR, from
tools/fetch-models.sh; exits 77, which CTest reports as skipped, without it).

Drives /v1/embeddings with the official `openai` client (its default base64 encoding, floats, token ids,
dimensions), /api/embed and /api/embeddings with the `ollama` client, LangChain's OllamaEmbeddings and
OpenAIEmbeddings where they are installed, and the error answers with plain HTTP; checks the vectors against the
sentence-transformers fixture (tests/fixtures/embeddings/minilm-st.json.zst), a small semantic-search ranking, and
that concurrent clients get the vectors they get alone. The exit status is the number of failed checks.

Usage: test_embeddings.py --switchyard EXE --plugin-dir DIR --source-dir SRC --work-dir DIR
"""
import json
import math
import os
import subprocess
import sys
import threading
import traceback

import ollama
import openai

import sy_server
from sy_server import CheckFailed, check

ARGS = None


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def norm(a):
    return math.sqrt(sum(x * x for x in a))


class Server(sy_server.Server):
    """One `switchyard serve` process in ARGS.work_dir/server with its own config file and log."""

    def __init__(self, config_text):
        super().__init__(ARGS, "server", config_text)


def fixture():
    import zstandard  # noqa: F401  (only where installed; else the plain-zstd CLI)
    path = os.path.join(ARGS.source_dir, "tests/fixtures/embeddings/minilm-st.json.zst")
    return json.loads(zstandard.ZstdDecompressor().decompress(open(path, "rb").read()))


def load_fixture():
    path = os.path.join(ARGS.source_dir, "tests/fixtures/embeddings/minilm-st.json.zst")
    try:
        return fixture()
    except ImportError:
        out = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
        return json.loads(out)


CHECKS = []


def checked(fn):
    CHECKS.append(fn)
    return fn


@checked
def openai_client(srv, fx):
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="none")
    cases = fx["cases"][:20] + [c for c in fx["cases"] if len(c["ids"]) == 256][:2]
    texts = [c["text"] for c in cases]
    # the client's default: base64, decoded by the client
    r = client.embeddings.create(model="text-embedding-3-small", input=texts, extra_body={"truncate": True})
    check(len(r.data) == len(texts), f"{len(r.data)} vectors for {len(texts)} inputs")
    for i, (d, c) in enumerate(zip(r.data, cases)):
        check(d.index == i and len(d.embedding) == 384, f"item {i}: index {d.index}, {len(d.embedding)} values")
        cs = cosine(d.embedding, c["vector"])
        check(cs >= 0.9999, f"input {i} ({c['text'][:40]!r}): cosine {cs:.6f} against sentence-transformers")
    check(r.usage.prompt_tokens == sum(len(c["ids"]) for c in cases) == r.usage.total_tokens,
          f"usage {r.usage} against {sum(len(c['ids']) for c in cases)} tokens")
    f = client.embeddings.create(model="minilm", input=texts[0], encoding_format="float")
    check(cosine(f.data[0].embedding, r.data[0].embedding) > 0.999999, "float and base64 disagree")
    ids = client.embeddings.create(model="minilm", input=cases[1]["ids"], encoding_format="float")
    check(cosine(ids.data[0].embedding, cases[1]["vector"]) >= 0.9999, "token ids give another vector")
    lists = client.embeddings.create(model="minilm", input=[cases[2]["ids"], cases[3]["ids"]])
    check(len(lists.data) == 2 and cosine(lists.data[1].embedding, cases[3]["vector"]) >= 0.9999, "list of lists")
    dims = client.embeddings.create(model="minilm", input=texts[0], dimensions=64, encoding_format="float")
    v = dims.data[0].embedding
    check(len(v) == 64 and abs(norm(v) - 1) < 1e-5, f"dimensions 64: {len(v)} values, norm {norm(v)}")
    full = f.data[0].embedding[:64]
    check(cosine(v, full) > 0.99999, "dimensions is not the renormalized prefix")
    try:
        client.embeddings.create(model="minilm", input=cases[-1]["text"])
        check(False, "an input past the context without truncate was accepted")
    except openai.BadRequestError as e:
        check("context" in str(e), f"too long: {e}")


@checked
def ollama_client(srv, fx):
    client = ollama.Client(host=srv.base)
    cases = fx["cases"][20:30]
    r = client.embed(model="minilm", input=[c["text"] for c in cases])
    check(len(r["embeddings"]) == len(cases), "embed: count")
    for i, c in enumerate(cases):
        check(cosine(r["embeddings"][i], c["vector"]) >= 0.9999, f"embed {i}: vector")
    check(r["prompt_eval_count"] == sum(len(c["ids"]) for c in cases), f"prompt_eval_count {r['prompt_eval_count']}")
    check(r["total_duration"] > 0 and r["load_duration"] >= 0, "durations")
    one = client.embed(model="minilm", input=cases[0]["text"], dimensions=32)
    check(len(one["embeddings"][0]) == 32 and abs(norm(one["embeddings"][0]) - 1) < 1e-5, "embed dimensions")
    old = client.embeddings(model="minilm", prompt=cases[0]["text"])
    check(cosine(old["embedding"], cases[0]["vector"]) >= 0.9999, "embeddings (prompt): vector")
    long_case = [c for c in fx["cases"] if len(c["ids"]) == 256][0]
    cut = client.embed(model="minilm", input=long_case["text"])
    check(cut["prompt_eval_count"] == 256 and cosine(cut["embeddings"][0], long_case["vector"]) >= 0.9999,
          "truncate (default true) does not cut as sentence-transformers does")
    try:
        client.embed(model="minilm", input=long_case["text"], truncate=False)
        check(False, "truncate false accepted an input past the context")
    except ollama.ResponseError as e:
        check(e.status_code == 400, f"truncate false: status {e.status_code}")
    empty = client.embed(model="minilm", input=[])
    check(empty["embeddings"] == [], "no input: no embeddings")
    client.embed(model="minilm", input="keep", keep_alive="10m")


@checked
def langchain(srv, fx):
    try:
        from langchain_ollama import OllamaEmbeddings
        from langchain_openai import OpenAIEmbeddings
    except ImportError as e:
        print(f"  (LangChain not installed here: {e}; skipped)")
        return
    texts = [c["text"] for c in fx["cases"][:5]]
    oe = OllamaEmbeddings(model="minilm", base_url=srv.base)
    docs = oe.embed_documents(texts)
    q = oe.embed_query(texts[0])
    check(len(docs) == 5 and cosine(docs[2], fx["cases"][2]["vector"]) >= 0.9999, "OllamaEmbeddings documents")
    check(cosine(q, fx["cases"][0]["vector"]) >= 0.9999, "OllamaEmbeddings query")
    ae = OpenAIEmbeddings(model="minilm", base_url=srv.base + "/v1", api_key="none",
                          check_embedding_ctx_length=False)
    docs = ae.embed_documents(texts)
    check(len(docs) == 5 and cosine(docs[4], fx["cases"][4]["vector"]) >= 0.9999, "OpenAIEmbeddings documents")
    check(cosine(ae.embed_query(texts[1]), fx["cases"][1]["vector"]) >= 0.9999, "OpenAIEmbeddings query")


@checked
def semantic_search(srv, fx):
    docs = ["Paris is the capital and most populous city of France.", "A man is riding a horse.",
            "To reset your password, open Settings and choose Forgot password.", "The cat sits outside.",
            "Berlin is the capital of Germany."]
    queries = {"What is the capital of France?": 0, "How do I change my password?": 2, "Where is the kitten?": 3}
    st, r = srv.post("/v1/embeddings", {"model": "minilm", "input": docs + list(queries), "encoding_format": "float"})
    check(st == 200, f"status {st}: {r}")
    vecs = [d["embedding"] for d in r["data"]]
    for k, (q, want) in enumerate(queries.items()):
        qv = vecs[len(docs) + k]
        best = max(range(len(docs)), key=lambda i: cosine(qv, vecs[i]))
        check(best == want, f"{q!r}: best document {best} ({docs[best]!r}), expected {want}")


@checked
def errors(srv, fx):
    st, r = srv.post("/v1/chat/completions", {"model": "minilm", "messages": [{"role": "user", "content": "hi"}]})
    check(st == 400 and "embedding model" in json.dumps(r), f"chat on an embedding model: {st} {r}")
    st, r = srv.post("/api/generate", {"model": "minilm", "prompt": "hi", "stream": False})
    check(st == 400, f"generate on an embedding model: {st}")
    st, r = srv.post("/v1/embeddings", {"model": "chat", "input": "x"})
    check(st == 400 and "does not produce embeddings" in json.dumps(r), f"embeddings of a chat model: {st} {r}")
    st, r = srv.post("/api/embed", {"model": "chat", "input": "x"})
    check(st == 400, f"/api/embed of a chat model: {st}")
    for body, what in [({"model": "minilm"}, "no input"), ({"model": "minilm", "input": []}, "empty list"),
                       ({"model": "minilm", "input": 5}, "a number"), ({"model": "minilm", "input": [1.5]}, "a fraction"),
                       ({"model": "minilm", "input": [999999]}, "an id past the vocabulary"),
                       ({"model": "minilm", "input": "x", "dimensions": 0}, "dimensions 0"),
                       ({"model": "minilm", "input": "x", "dimensions": 385}, "dimensions past the model's"),
                       ({"model": "minilm", "input": "x", "encoding_format": "hex"}, "encoding_format hex"),
                       ({"model": "minilm", "input": [[]]}, "an empty id list"), ({"input": "x"}, "no model")]:
        st, r = srv.post("/v1/embeddings", body)
        check(st in (400, 404) and "error" in r, f"{what}: {st} {r}")
    st, r = srv.post("/v1/rerank", {"model": "minilm", "query": "q", "documents": ["d"]})
    check(st == 400 and "not a reranking model" in json.dumps(r), f"rerank of an embedding model: {st} {r}")
    st, r = srv.post("/api/show", {"model": "minilm"})
    check(st == 200 and r.get("capabilities") == ["embedding"], f"/api/show capabilities: {r.get('capabilities')}")


@checked
def concurrent_clients(srv, fx):
    texts = [c["text"] for c in fx["cases"][30:62]]
    st, alone = srv.post("/v1/embeddings", {"model": "minilm", "input": texts, "encoding_format": "float"})
    check(st == 200, f"status {st}")
    alone = [d["embedding"] for d in alone["data"]]
    results, errors_seen = [None] * 8, []

    def client(k):
        try:
            s, r = srv.post("/v1/embeddings", {"model": "minilm", "input": texts[k * 4:(k + 1) * 4],
                                               "encoding_format": "float"})
            results[k] = [d["embedding"] for d in r["data"]] if s == 200 else None
        except Exception as e:  # noqa: BLE001
            errors_seen.append(repr(e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors_seen, f"clients failed: {errors_seen}")
    for k in range(8):
        check(results[k] is not None, f"client {k} got no vectors")
        for j in range(4):
            d = max(abs(a - b) for a, b in zip(results[k][j], alone[k * 4 + j]))
            check(d < 1e-5, f"client {k} input {j}: differs by {d} from the request alone")


@checked
def rerank(srv, fx):
    exp = json.load(open(os.path.join(ARGS.source_dir, "tests/fixtures/hf/bert-tiny-rerank/expected.json")))
    q = exp["cases"][0]["query"]
    cases = [c for c in exp["cases"] if c["query"] == q]
    docs = [c["document"] for c in cases]
    for path in ("/v1/rerank", "/rerank"):
        st, r = srv.post(path, {"model": "rerank", "query": q, "documents": docs, "top_n": 3})
        check(st == 200, f"{path}: {st} {r}")
        want = sorted(range(len(cases)), key=lambda i: -cases[i]["score"])[:3]
        got = [x["index"] for x in r["results"]]
        check(got == want, f"{path}: order {got}, transformers' {want}")
        for x in r["results"]:
            w = cases[x["index"]]["score"]
            check(abs(x["relevance_score"] - w) <= 1e-4 * abs(w), f"{path}: score {x['relevance_score']} vs {w}")
        check(r["usage"]["prompt_tokens"] == sum(len(c["ids"]) for c in cases), f"usage {r['usage']}")
    st, r = srv.post("/v1/embeddings", {"model": "rerank", "input": "x"})
    check(st == 400 and "reranking model" in json.dumps(r), f"embeddings of a reranker: {st} {r}")
    st, r = srv.post("/v1/rerank", {"model": "rerank", "query": q})
    check(st == 400, f"rerank without documents: {st}")


def main():
    global ARGS
    ap = sy_server.argument_parser()
    ARGS = sy_server.parse_arguments(ap)
    minilm = os.environ.get("SY_MINILM_DIR")
    if not minilm or not os.path.isdir(minilm):
        print("SY_MINILM_DIR is not set (tools/fetch-models.sh fetches all-MiniLM-L6-v2): skipped")
        return 77
    fx = load_fixture()
    chat = os.path.join(ARGS.source_dir, "tests/fixtures/test-engine/alpha.model")
    srv = Server(f"""[model.minilm]
plugin = qwen-cpu-mmap
path = {minilm}
aliases = text-embedding-3-small
threads = 2
group = embed

[model.rerank]
plugin = qwen-cpu-mmap
path = {os.path.join(ARGS.source_dir, "tests/fixtures/hf/bert-tiny-rerank")}
group = rerank

[model.chat]
plugin = test-engine
path = {chat}
group = chat
""")
    failed = 0
    try:
        for fn in CHECKS:
            try:
                fn(srv, fx)
                print(f"ok   {fn.__name__}")
            except Exception as e:  # noqa: BLE001
                failed += 1
                print(f"FAIL {fn.__name__}: {e}")
                if not isinstance(e, CheckFailed):
                    traceback.print_exc()
    finally:
        try:
            srv.stop(timeout=30)
        except CheckFailed as e:
            failed += 1
            print(f"FAIL stop: {e}")
    if failed:
        print("server log:\n" + srv.log_text()[-4000:])
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
