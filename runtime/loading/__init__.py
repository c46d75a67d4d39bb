"""Loading and checking an untrusted export: confined paths, the manifest, ONNX files, limits, the tokenizer and the datastore file."""
