"""Capture: the only code that talks to torch.export and torch.onnx. ``export.export`` turns
the wrapped module, called with one input schema, into an ONNX model and its schema
(docs/architecture.md). Its modules are layers, each importing only those below it:

    common -> bridge -> trace -> fx | torch_onnx -> export
"""
