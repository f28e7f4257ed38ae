"""kvzip.compress, kvzip.calibrate and kvzip.query: the C++ engine (the CLI's compress,
calibrate --scorer and query) from Python.

Both release the GIL while they work. Models are loaded once per path and kept (kvzip.Model).
"""
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from . import _kvzip
from ._cache import Cache, open as open_cache
from .errors import InvalidArgumentError

DEFAULT_QUERY_TEMPLATE = "\n\nQuestion: {question}"
_models = {}
_models_lock = threading.Lock()


class Model:
    """A model kvzip loads (GGUF file or Hugging Face folder). path None: $KVZIP_MODEL, else the
    default model that scripts/fetch-model.sh downloads."""

    def __init__(self, path=None):
        self._m = _kvzip.Model.load(os.fspath(path) if path else "")

    path = property(lambda self: self._m.path)

    @property
    def description(self):
        """Fingerprint and shape as a .kvz header records them (the `model` argument of kvzip.write)."""
        return self._m.description()

    def encode(self, text):
        return self._m.encode(text)

    def decode(self, ids):
        return self._m.decode(list(ids))


def model(path=None):
    """The Model at `path`, loaded once and then shared."""
    if isinstance(path, Model):
        return path
    key = os.fspath(path) if path else ""
    with _models_lock:
        if key not in _models:
            _models[key] = Model(path)
        return _models[key]


def model_description(path=None):
    """A model's fingerprint and shape, for kvzip.write."""
    return model(path).description


def _is_path(item, folders=False):
    """True when `item` names a file (or, with folders, a folder) rather than holding text."""
    if isinstance(item, os.PathLike):
        return True
    return (isinstance(item, str) and "\n" not in item and len(item) < 4096
            and (os.path.isfile(item) or (folders and os.path.isdir(item))))


def compress(text_or_path, output=None, *, model=None, ratio=0.3, method=None, scorer=None, stream=False,
             kv_dtype="f16", level="global", kv_group=0, zstd=0, force=False, system="",
             query_template=DEFAULT_QUERY_TEMPLATE, threads=0, progress=None):
    """Compresses a document (its text, or the path of a UTF-8 file) into `output` (.kvz) and
    returns the opened Cache. output defaults to the file's name with .kvz. method defaults to
    "kvzip", or to "kvzap" when scorer (the path of a .kvp made by kvzip.calibrate or `kvzip
    calibrate --scorer`) is given. stream=True (with a scorer) drops rows while the document is
    read, as `kvzip compress --stream`: memory follows the kept rows, not the document.
    progress(done, total) is called with prefilled tokens as the document is read. kv_dtype
    defaults to f16, as `kvzip compress` does."""
    if _is_path(text_or_path):
        src = os.fspath(text_or_path)
        with open(src, "rb") as f:
            text = f.read().decode("utf-8")
        if output is None:
            output = os.path.splitext(src)[0] + ".kvz"
    else:
        text = text_or_path
        if output is None:
            raise InvalidArgumentError("compress: give output= (the .kvz path) when compressing text")
    m = globals()["model"](model)
    _kvzip.compress(m._m, text, os.fspath(output), ratio=ratio, method=method or "", level=level,
                    kv_dtype=kv_dtype, kv_group=kv_group, zstd=zstd, force=force, system=system,
                    query_template=query_template, threads=threads,
                    scorer=os.fspath(scorer) if scorer is not None else "", stream=stream,
                    progress=progress)
    return open_cache(output)


@dataclass
class Calibration:
    """What kvzip.calibrate wrote: the .kvp and its held-out fit. r2 and spearman map each target
    ("kvzip", "kvzip+") to an (L) array, within each KV head and averaged over the layer's heads
    (NaN for a layer that is not scored, or with no windows held out)."""
    path: str
    target: str  # what the file predicts
    checksum: str
    window: int
    train_windows: int
    heldout_windows: int
    train_tokens: int
    heldout_tokens: int
    seconds: float
    r2: dict = field(repr=False)
    spearman: dict = field(repr=False)


def calibrate(texts_or_paths, output, *, model=None, target="kvzip+", window=1000, heldout_every=10,
              force=False, progress=None, alpha=1.0, system="", threads=0):
    """Trains the learned scorer (method kvzap) for a model, as `kvzip calibrate --scorer`: on
    calibration texts (a text, a file or folder path, or a list of them; best not the documents you
    will compress), in windows of `window` tokens, every heldout_every-th held out to measure the
    fit. Writes `output` (.kvp) atomically and returns a Calibration. progress(done, total) is
    called with calibration tokens after every window."""
    items = [texts_or_paths] if isinstance(texts_or_paths, (str, os.PathLike)) else list(texts_or_paths)
    texts = []
    for i, item in enumerate(items):
        if _is_path(item, folders=True):
            texts += _kvzip.calibration_texts([os.fspath(item)])
        elif isinstance(item, str):
            texts.append((f"text-{i + 1}", item))
        else:
            raise InvalidArgumentError(f"calibrate: item {i} is a {type(item).__name__}, not a text or a path")
    m = globals()["model"](model)
    d = _kvzip.calibrate(m._m, texts, os.fspath(output), target=target, window=window,
                         heldout_every=heldout_every, alpha=alpha, force=force, system=system,
                         threads=threads, progress=progress)
    fits = d.pop("fits")
    return Calibration(**d, r2={t: np.asarray(f["r2"], dtype=np.float32) for t, f in fits.items()},
                       spearman={t: np.asarray(f["spearman"], dtype=np.float32) for t, f in fits.items()})


@dataclass
class Answer:
    question: str
    text: str
    tokens: list
    stopped: bool  # ended on a stop token (not cut by max_tokens)
    ms: float
    first_token_ms: float
    first_logits: np.ndarray = field(repr=False)  # (V) the distribution that chose the first token


class Session:
    """A loaded cache that answers questions; every question sees the compressed state."""

    def __init__(self, cache, model=None, *, force=False, matmul="fast", threads=0, kv_f32=False):
        path = cache.path if isinstance(cache, Cache) else os.fspath(cache)
        self.model = globals()["model"](model)
        self._s = _kvzip.Session.open(self.model._m, path, force=force, matmul=matmul, threads=threads,
                                      kv_f32=kv_f32)

    load_ms = property(lambda self: self._s.load_ms)

    def ask(self, question, *, max_tokens=128, temperature=0.0, seed=0, on_text=None):
        d = self._s.ask(question, max_tokens=max_tokens, temperature=temperature, seed=seed, on_text=on_text)
        return Answer(**d)


def query(cache, questions, *, model=None, max_tokens=128, temperature=0.0, seed=0, matmul="fast",
          force=False, threads=0, on_text=None):
    """Answers one question (str) or several (list) from a cache (Cache or path), as `kvzip query`.
    matmul "exact" computes in fp32 (for comparing caches). on_text(piece) streams the text."""
    s = Session(cache, model, force=force, matmul=matmul, threads=threads)
    one = isinstance(questions, str)
    out = [s.ask(q, max_tokens=max_tokens, temperature=temperature, seed=seed, on_text=on_text)
           for q in ([questions] if one else questions)]
    return out[0] if one else out



def search(folder, question, *, top_k=4, model=None):
    """The caches of a folder ranked for a question (BM25 over their documents' text), best first:
    dicts with id, path, score, tokens. The folder's index (.kvzip-index.sqlite) is refreshed
    first. model (a Model or a GGUF path): only that model's caches; None: every model's."""
    m = globals()["model"](model)._m if model is not None else None
    return _kvzip.search(os.fspath(folder), question, top_k=top_k, model=m)


@dataclass
class LibraryAnswer:
    question: str
    text: str
    tokens: list
    stopped: bool
    ms: float
    first_token_ms: float
    sources: list  # dicts with id, path, score, tokens: the caches composed, in order


def ask(folder, question, *, top_k=4, model=None, max_tokens=128, blend=None, threads=0):
    """Answers a question from the caches of a folder it needs, as `kvzip ask`: the top_k caches of
    the model by BM25 that fit its context, composed in that order (blend as `kvzip query a+b`; None: the model's default)."""
    m = globals()["model"](model)
    d = _kvzip.ask(m._m, os.fspath(folder), question, top_k=top_k, max_tokens=max_tokens, blend=blend,
                   threads=threads)
    return LibraryAnswer(**d)
