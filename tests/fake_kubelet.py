#!/usr/bin/env python3
"""A fake kubelet for tests/all/kubelet_pods.rs: serves v1.PodResourcesLister/List on a unix
socket with grpcio, answering what ANSWER_FILE holds at each call (so a test can change it):

    {"pods": [{"namespace": "ml", "name": "trainer-0", "containers": [
        {"name": "main", "devices": [{"resource": "nvidia.com/gpu", "ids": ["GPU-..."]}]}]}],
     "delay": 0, "garbage": false}

The protobuf is encoded by hand (no generated code, no protoc): strings and nested messages
are length-delimited fields. "delay" sleeps before answering; "garbage" answers bytes that
are not a ListPodResourcesResponse. A string "hex:6261ff" is sent as those bytes (a name
that is not UTF-8). "generate": {"pods": N, "ids": [...], "pad": K} adds N pods in
namespace "gen", each with one container holding every id, named gen-<i> plus K "x"s (to
make an answer of many megabytes).

    fake_kubelet.py SOCKET ANSWER_FILE
"""
import json
import sys
import time
from concurrent import futures

import grpc


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    if isinstance(payload, str):
        payload = bytes.fromhex(payload[4:]) if payload.startswith("hex:") else payload.encode()
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def response(answer):
    out = b""
    pods = list(answer.get("pods", []))
    generate = answer.get("generate")
    if generate:
        pad = "x" * generate.get("pad", 0)
        for i in range(generate["pods"]):
            pods.append({"namespace": "gen", "name": f"gen-{i}{pad}", "containers": [
                {"name": "c", "devices": [{"resource": "nvidia.com/gpu", "ids": generate["ids"]}]}]})
    parts = []
    for pod in pods:
        body = field(1, pod["name"]) + field(2, pod["namespace"])
        for container in pod.get("containers", []):
            c = field(1, container["name"])
            for device in container.get("devices", []):
                d = field(1, device["resource"])
                for device_id in device["ids"]:
                    d += field(2, device_id)
                c += field(2, d)
            # cpu_ids (field 3, packed int64), which gpuwarden ignores, as a real kubelet sends.
            c += field(3, varint(2) + varint(3))
            body += field(3, c)
        parts.append(field(1, body))
    out += b"".join(parts)
    return out


def main():
    socket, answer_file = sys.argv[1], sys.argv[2]

    def list_pods(request, context):
        with open(answer_file) as f:
            answer = json.load(f)
        time.sleep(answer.get("delay", 0))
        if answer.get("garbage"):
            return b"\xff\xff\xff\xff"
        return response(answer)

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {"List": grpc.unary_unary_rpc_method_handler(list_pods, request_deserializer=None, response_serializer=None)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    print("serving", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
