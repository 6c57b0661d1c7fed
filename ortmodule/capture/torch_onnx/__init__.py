"""The stock lowering: torch.onnx's ``export(exported_program, dynamo=True, optimize=False)``
of the trace, with what it gets wrong for training put right (``exporter="dynamo"``, and
``"auto"`` where the fx lowering has no translation).

Bottom to top: ``translations`` (the fix-up table of training semantics: train-mode
BatchNorm, Embedding's padding row, detach), ``sequences`` (sequence values rewritten into
tensors), ``aten_bridge`` (ATen ops and bridged calls as TorchCall nodes), ``lower``. It
never imports the ``fx`` lowering.
"""
