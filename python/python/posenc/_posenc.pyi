"""The compiled half of posenc (Rust, PyO3). Call the functions of ``posenc`` instead:
they take array-likes, dicts and paths and turn device notes into warnings."""

from typing import Any, Optional

import numpy as np
import numpy.typing as npt

# Ids, positions and offsets: any NumPy integer type, either byte order, aligned, not copied.

ACCURACY_BOUND: float
MAX_OUTPUT_VALUES: int
MAX_ALIBI_HEADS: int
THREADS_NOTE: Optional[str]

class GpuError(RuntimeError):
    """The GPU could not be had or failed: no adapter (device="gpu"), a wgpu error, a lost
    device, device memory exhausted, or a request past a limit of the GPU path."""

Note = Optional[str]
# A multimodal RoPE's (mrope_section, mrope_layout, mrope_axes).
Mrope = tuple[tuple[int, int, int], str, npt.NDArray[np.uint8]]

def table(
    *,
    dim: Optional[int],
    len: Optional[int],
    positions_spec: Optional[str],
    positions: Optional[npt.NDArray[np.integer]],
    config_path: Optional[str],
    config_json: Optional[str],
    config_name: Optional[str] = None,
    variant: Optional[str],
    frequencies: str,
    inv_freq: Optional[npt.NDArray[np.float64]],
    inv_freq_path: Optional[str],
    inv_freq_tensor: Optional[str],
    base: Optional[float],
    min_timescale: Optional[float],
    max_timescale: Optional[float],
    start_index: Optional[int],
    padding_idx: Any,
    device: str,
    gpu_memory_budget: Optional[int],
    out: Optional[npt.NDArray[np.float32]] = None,
) -> tuple[Optional[npt.NDArray[np.float32]], Note]: ...
def encode(
    *,
    weights: Optional[np.ndarray],
    weights_path: Optional[str],
    tensor: Optional[str],
    ids: np.ndarray,
    one_sequence: bool,
    positions: Optional[npt.NDArray[np.integer]],
    offsets: Optional[npt.NDArray[np.integer]],
    pad_id: Optional[int],
    scale: Any,
    config_path: Optional[str],
    config_json: Optional[str],
    config_name: Optional[str] = None,
    variant: Optional[str],
    frequencies: str,
    inv_freq: Optional[npt.NDArray[np.float64]],
    inv_freq_path: Optional[str],
    inv_freq_tensor: Optional[str],
    base: Optional[float],
    min_timescale: Optional[float],
    max_timescale: Optional[float],
    start_index: Optional[int],
    padding_idx: Any,
    position_table: Optional[np.ndarray],
    position_table_path: Optional[str],
    position_tensor: Optional[str],
    out_dtype: str,
    device: str,
    gpu_memory_budget: Optional[int],
    out: Optional[np.ndarray] = None,
) -> tuple[Optional[np.ndarray], Note]: ...
def rope(
    *,
    x: np.ndarray,
    out: Optional[np.ndarray] = None,
    layout: str,
    positions: Optional[npt.NDArray[np.integer]],
    offset: Optional[int],
    config_path: Optional[str],
    config_json: Optional[str],
    layer_type: Optional[str],
    pairing: Optional[str],
    rotary_dim: Optional[int],
    base: Optional[float],
    scaling_json: Optional[str],
    scaling_path: Optional[str],
    inv_freq: Optional[npt.NDArray[np.float64]],
    inv_freq_path: Optional[str],
    inv_freq_tensor: Optional[str],
    attention_factor: Optional[float],
    seq_len: Optional[int],
    device: str,
) -> tuple[Optional[np.ndarray], Note]: ...
def rope_cache(
    *,
    head_dim: Optional[int],
    config_path: Optional[str],
    config_json: Optional[str],
    config_name: Optional[str] = None,
    layer_type: Optional[str],
    pairing: Optional[str],
    rotary_dim: Optional[int],
    base: Optional[float],
    scaling_json: Optional[str],
    scaling_path: Optional[str],
    inv_freq: Optional[npt.NDArray[np.float64]],
    inv_freq_path: Optional[str],
    inv_freq_tensor: Optional[str],
    attention_factor: Optional[float],
    seq_len: Optional[int],
    len: Optional[int],
    positions_spec: Optional[str],
    positions: Optional[npt.NDArray[np.integer]],
    dtype: str,
    device: str,
) -> tuple[
    np.ndarray, np.ndarray, npt.NDArray[np.float32], float, str, Note, Optional[Mrope]
]: ...
def alibi_slopes(heads: int) -> npt.NDArray[np.float32]: ...
def alibi_bias(
    *,
    heads: int,
    len: int,
    kv_len: Optional[int],
    form: str,
    offset: int,
    device: str,
    out: Optional[npt.NDArray[np.float32]] = None,
) -> tuple[Optional[npt.NDArray[np.float32]], Note]: ...
def read_config_text(path: str) -> str: ...
def module_pairing(json: str, name: Optional[str] = None) -> str: ...
def devices_json() -> str: ...
def no_adapter_hint() -> str: ...
def _panic_for_test() -> None: ...

class RopeSpec:
    @property
    def mrope(self) -> Optional[Mrope]: ...
    def __init__(
        self,
        *,
        head_dim: Optional[int],
        config_path: Optional[str],
        config_json: Optional[str],
        config_name: Optional[str] = None,
        layer_type: Optional[str],
        pairing: Optional[str],
        rotary_dim: Optional[int],
        base: Optional[float],
        scaling_json: Optional[str],
        scaling_path: Optional[str],
        inv_freq: Optional[npt.NDArray[np.float64]],
        inv_freq_path: Optional[str],
        inv_freq_tensor: Optional[str],
        attention_factor: Optional[float],
        seq_len: Optional[int],
    ) -> None: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def rotary_dim(self) -> int: ...
    @property
    def pairing(self) -> str: ...
    @property
    def base(self) -> float: ...
    @property
    def rope_type(self) -> str: ...
    @property
    def depends_on_length(self) -> bool: ...
    def frequencies(self, seq_len: int) -> tuple[npt.NDArray[np.float64], float]: ...
    def with_pairing(self, pairing: str) -> "RopeSpec": ...
    def cache(
        self, positions: str | npt.NDArray[np.integer]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
