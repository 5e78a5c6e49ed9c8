"""A Model as a .tflite file: write() as TF's converter does, read() strictly with numpy only.

This module offers both (and read_file); the code is in tflite_writer.py, tflite_reader.py,
tflite_checks.py (the model checks both run) and tflite_op_names.py (the op names' metadata).
"""
from .tflite_checks import INT32_MAX, MAX_ELEMENTS, MAX_RANK
from .tflite_op_names import OP_NAMES_METADATA
from .tflite_reader import read, read_file
from .tflite_writer import (MIN_RUNTIME_BUFFER_SIZE, MIN_RUNTIME_METADATA, SIGNATURE_KEY,
                            SUBGRAPH_NAME, write)

__all__ = ["INT32_MAX", "MAX_ELEMENTS", "MAX_RANK", "MIN_RUNTIME_BUFFER_SIZE",
           "MIN_RUNTIME_METADATA", "OP_NAMES_METADATA", "SIGNATURE_KEY", "SUBGRAPH_NAME",
           "read", "read_file", "write"]
