#!/usr/bin/env python3
"""The Python protobuf runtime as an outside oracle for the Swift codec tests.

Usage: oracle.py DESCRIPTOR_SET < requests.json > answers.json

DESCRIPTOR_SET is a FileDescriptorSet written by `protoc --include_imports --descriptor_set_out`.
requests.json is a list of objects, each answered in order by one object:
  {"op": "to_json", "type": T, "data": BASE64}     -> {"json": json_format.MessageToJson(msg)}
  {"op": "from_json", "type": T, "json": TEXT}     -> {"data": BASE64 of the deterministic binary}
  {"op": "parse", "type": T, "data": BASE64}       -> {"ok": true} or {"error": "..."}
Failures answer {"error": "..."} instead.
"""
import base64
import json
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory


def main():
    file_set = descriptor_pb2.FileDescriptorSet.FromString(open(sys.argv[1], "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for proto in file_set.file:
        pool.Add(proto)
    classes = {}

    def new(type_name):
        if type_name not in classes:
            classes[type_name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(type_name))
        return classes[type_name]()

    answers = []
    for request in json.load(sys.stdin):
        try:
            message = new(request["type"])
            op = request["op"]
            if op == "to_json":
                message.ParseFromString(base64.b64decode(request["data"]))
                answers.append({"json": json_format.MessageToJson(message)})
            elif op == "from_json":
                json_format.Parse(request["json"], message)
                data = message.SerializeToString(deterministic=True)
                answers.append({"data": base64.b64encode(data).decode("ascii")})
            elif op == "parse":
                message.ParseFromString(base64.b64decode(request["data"]))
                answers.append({"ok": True})
            else:
                answers.append({"error": "unknown op " + op})
        except Exception as error:  # the error text is the answer
            answers.append({"error": "%s: %s" % (type(error).__name__, error)})
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
