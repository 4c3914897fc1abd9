"""What the compiler needs of the CUDA backend, which it does not import:
moye/__init__.py fills HOOKS in, as it puts the backends into
frontend.BACKENDS. The autotuner (autotune.py) is their reader."""
import types

HOOKS = types.SimpleNamespace(
    driver=None,                # () -> backend/cuda/driver: device_name, stream_handle, raise_error
    current_stream=None,        # backend/cuda/backend.current_stream_getter
)
