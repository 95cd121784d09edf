# SPDX-License-Identifier: Apache-2.0
"""Python client for mlpd, the MLP inference daemon.

    from mlpd_client import Client
    with Client("/run/mlpd/mlpd.sock") as c:
        print(c.health())
        r = c.infer(rows)              # rows: numpy [n, in_features] or lists
        print(r.output, r.queue_us, r.compute_us)
        r = c.infer(rows, model="digits")  # a daemon serving several models
        with c.register_region("io", 1 << 20) as reg:   # shared memory
            x = reg.array("f32", (n, in_features))
            y = reg.array("f32", (n, out_features), offset=x.nbytes)
            x[:] = rows
            c.infer(x, out=y)          # only references cross the socket

Pure Python over the daemon's Unix socket with protobuf (proto/mlpd.proto,
generated as mlpd_pb2); numpy is optional. See client.py for the error
model: TransportError when no answer came, a StatusError subclass per
non-OK status from blocking calls, statuses as result fields from recv().

asyncio: AsyncClient, many requests in flight on one connection:

    async with await AsyncClient.connect(path) as c:
        results = await asyncio.gather(*(c.infer(x) for x in chunks))
"""
from .client import (BF16, DEFAULT_MAX_FRAME, DEFAULT_SOCKET, F16, F32,
                     Cancelled, Client, DeadlineExceeded, DeviceInfo,
                     FrameTooLarge, Health, InferResult, Internal,
                     InvalidArgument, LayerInfo, MlpdError, ModelInfo,
                     ModelStatus, NotFound, PermissionDenied, Region, ResourceExhausted,
                     StatusError, TransportError, Unavailable, Unimplemented,
                     status_name)
from .aio import AsyncClient
from . import mlpd_pb2

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "BF16", "DEFAULT_MAX_FRAME", "DEFAULT_SOCKET", "F16", "F32", "Cancelled",
    "Client", "DeadlineExceeded", "DeviceInfo", "FrameTooLarge", "Health",
    "InferResult", "Internal", "InvalidArgument", "LayerInfo", "MlpdError",
    "ModelInfo", "ModelStatus", "NotFound", "PermissionDenied", "Region", "ResourceExhausted",
    "StatusError", "TransportError", "Unavailable", "Unimplemented",
    "mlpd_pb2", "status_name",
]
