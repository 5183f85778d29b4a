"""The model zoo: the models and workloads that tests, benchmarks, examples and experiments share.

* ``vdla.zoo.models``: ONNX model builders (ResNet/ResNet-18, a small ResNet, MobileNet-v1/v2, an MLP) with
  seeded weights, seeded calibration images, onnxruntime's static QDQ quantization (the int8 reference) and
  the comparisons made with it (``qdq_output_scale``, ``cosine_rows``);
* ``vdla.zoo.resnet``: the ResNet-18 layer table C1..C12 and each layer's seeded int8 data (``layer_specs``,
  ``layer_case``);
* ``vdla.zoo.tiled_matmul``: the hand-scheduled tiled int8 matmul on the runtime API and its numpy oracle;
* ``vdla.zoo.workloads``: the programs that characterise the accelerator (``SUITE``, ``gemm_bound``), each
  checked against numpy;
* ``vdla.zoo.random_programs``: random valid programs over the whole instruction set, on any configuration (the
  simulator-against-RTL campaign's, ``vdla fuzz``, and tests/test_rtl_differential.py's).

Invariants: everything here is deterministic (seeded); the zoo imports the library (``vdla.config``,
``vdla.isa``, ``vdla.compiler``, ``vdla.graph``, ``vdla.runtime``) and never ``vdla.experiments``; no
library module imports the zoo. Optional dependencies (onnx, onnxruntime) are imported inside the functions
that use them, so ``import vdla.zoo`` and its modules need numpy alone.
"""
