"""ortmodule's own lowering of torch.export's ATen graph to ONNX (``exporter="fx"``, and
``"auto"`` wherever its translation table covers the program).

Bottom to top: ``registry`` (the translation table), ``builder`` (the ONNX graph being
written and the walk over the FX graph), ``ops`` (one module per op family, registering
into the table), ``autocast`` (autocast's casts made explicit), ``lower`` (the program to
an ONNX model). It never imports the ``torch_onnx`` lowering.
"""
