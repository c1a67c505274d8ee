"""Read the history of an offline wandb run back from its `run-<id>.wandb` file (no server needed).

wandb 0.31 has no public reader for offline runs, so this parses its transaction log: a LevelDB-style
log (7-byte file header `:W&B` + magic + version; then 32 KiB blocks of chunks, each with a 7-byte
header <crc32 u32, length u16, type u8>, type 1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST; a block tail shorter
than a header is zero padding) whose records are `wandb_internal_pb2.Record` protobufs. History rows
are the records of type `history`; a partially written tail is ignored.
"""

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
HEADER = 7
FULL, LAST = 1, 4


def offline_run_file(wandb_dir: Path) -> Path:
    """The one `run-*.wandb` file under `wandb_dir` (the WANDB_DIR of a single offline run)."""
    files = sorted(Path(wandb_dir).glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, f"expected one offline run under {wandb_dir}, found {files}"
    return files[0]


def read_offline_history(path: Path) -> list[dict]:
    """The logged rows (veRL's metrics plus wandb's `_step`, `_runtime`, `_timestamp`), in order."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B transaction log")
    rows, pos, parts = [], HEADER, []
    while True:
        if BLOCK - pos % BLOCK < HEADER:
            pos += BLOCK - pos % BLOCK
        if pos + HEADER > len(data):
            break
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0 or pos + HEADER + length > len(data):
            break
        parts.append(data[pos + HEADER : pos + HEADER + length])
        pos += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
    return rows
