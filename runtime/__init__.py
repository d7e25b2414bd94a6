"""octune's reference runtime: whole ONNX networks on OpenCL with looked-up configs
(``executor.Runtime``, configs from ``sources``, checked against onnxruntime by ``verify``).
"""
