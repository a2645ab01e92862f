"""Server reflection with Python's stock `grpcio-reflection` client, which speaks `v1alpha`."""

from __future__ import annotations

import grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase


def test_v1alpha_reflection_lists_and_describes_the_service(server_address):
    with grpc.insecure_channel(server_address) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        services = set(db.get_services())
        assert "codegym.v1.EnvService" in services
        file = db.FindFileContainingSymbol("codegym.v1.EnvService")
        methods = {m.name for s in file.service for m in s.method}
        assert {"Evaluate", "ListTasks", "Session"} <= methods
