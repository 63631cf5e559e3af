"""Generated protobuf/gRPC modules for specdec.v1 (common_pb2, router_pb2, router_pb2_grpc).

The modules are not committed: ``clients/python/generate_protos.sh`` writes them here, and
``import specdec`` generates them on first use when they are missing (see ``specdec._protos``).
"""
