"""kvzip: offline, query-agnostic KV-cache compression — .kvz files from Python.

  kvzip.open(path) -> Cache            read a .kvz (numpy arrays, zero-copy where possible)
  kvzip.write(path, ...)               write a .kvz from numpy arrays
  kvzip.compress(doc, out, ...)        compress a document with the C++ engine
  kvzip.calibrate(texts, out, ...)     train the learned scorer (.kvp) of method kvzap
  kvzip.query(cache, questions, ...)   answer questions from a cache with the C++ engine
  kvzip.ask(folder, question, ...)     answer from the caches of a folder a question needs, composed
  kvzip.search(folder, question, ...)  rank the caches of a folder for a question
  kvzip.transformers                   load a .kvz into a Hugging Face transformers model

docs/python.md describes them.
"""
from . import errors
from ._cache import Cache, Layer, open
from ._engine import (Answer, Calibration, LibraryAnswer, Model, Session, ask, calibrate, compress, model,
                      model_description, query, search)
from ._kvzip import __version__, export_hdf5, hdf5_available
from ._write import DEFAULT_QUERY_TEMPLATE, write
from .errors import *  # noqa: F401,F403

__all__ = ["Cache", "Layer", "open", "write", "compress", "calibrate", "Calibration", "query", "ask", "search", "Session", "Answer",
           "LibraryAnswer", "Model", "model",
           "model_description", "export_hdf5", "hdf5_available", "errors", "DEFAULT_QUERY_TEMPLATE",
           "__version__"] + errors.__all__
