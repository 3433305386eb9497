"""Networks and algorithms (stage 2). Imports robot_rl.core only (+ torch).

- :mod:`policies.config`: ``EncoderConfig``, ``SACConfig`` (RLPD ingredients as fields),
  ``BCConfig``.
- :mod:`policies.encoders`: state MLP, conv encoder + DrQ random shift, frozen
  EfficientNet-Lite0 + spatial learned embeddings, ``ObsEncoder`` (one encoder per camera).
- :mod:`policies.networks`: tanh-Gaussian actor, vectorised critic ensemble, HL-Gauss.
- :mod:`policies.sac`: ``SACAgent``, the whole SAC/RLPD update in one file.
- :mod:`policies.bc`: ``BCAgent``.
- :mod:`policies.io`: ``save_agent`` / ``load_agent`` (safetensors + JSON, no pickle).

Nothing is imported here: importing ``policies`` does not import torch.
"""
