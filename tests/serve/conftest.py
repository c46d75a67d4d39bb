"""The serving tests' shared fixtures: a test module names the export it serves (`served_export`), and gets the
server on free local ports (`server`), HTTP and gRPC clients of it (`http`, `grpc`) and the Python API on the same
export (`reference`, what every served answer must equal), each once per module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def server(served_export):
    from specdec.serve.server import Server, free_ports

    http, grpc, metrics = free_ports(3)
    with Server(served_export, http_port=http, grpc_port=grpc, metrics_port=metrics, address="127.0.0.1",
                exit_timeout_s=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    import tritonclient.http

    client = tritonclient.http.InferenceServerClient(f"127.0.0.1:{server.http_port}", concurrency=8)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(server):
    import tritonclient.grpc

    client = tritonclient.grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield client
    client.close()


@pytest.fixture(scope="module")
def reference(served_export):
    """The Python API on the same export: what every served answer must equal."""
    from specdec.runtime import SpeculativeDecoder

    return SpeculativeDecoder.load(served_export, provider="cpu")
