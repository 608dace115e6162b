"""Rebuilding the switchyard-demo model family (models/switchyard-demo/): corpus, tokenizer, target +
MTP head + DFlash drafter, distillation, export, acceptance report. PyTorch on the lent GPU; the
runtime never imports this package (tests/test_architecture.py).

Install with the `training` extra (`pip install 'switchyard[training]'`), then run a step as
`switchyard-train STEP ...` or `python -m training.STEP ...` (training/README.md lists them).
Importing the package imports nothing heavy; torch is imported by the steps that train.
"""
