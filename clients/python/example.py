#!/usr/bin/env python3
"""Streams one generation from a specdec router and prints tau.

    /usr/bin/python3 clients/python/example.py [--address 127.0.0.1:50050] [--method DRAFT_CHAIN]
        [--max-new-tokens 64] [--tls-ca CA.pem [--tls-cert CERT.pem --tls-key KEY.pem]] [prompt]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from specdec import Client, GenerateOptions, SpecdecError  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Once upon a time")
    ap.add_argument("--address", default="127.0.0.1:50050")
    ap.add_argument("--method", default="DRAFT_CHAIN")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--tls-ca", help="PEM CA of the router's certificate: connect over TLS")
    ap.add_argument("--tls-cert", help="PEM client certificate (mTLS), with --tls-key")
    ap.add_argument("--tls-key", help="PEM key of --tls-cert")
    args = ap.parse_args()
    try:
        opts = GenerateOptions(method=args.method, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature)
        client = Client(args.address, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                        tls_key=args.tls_key)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with client:
        try:
            stream = client.generate_stream(args.prompt, opts)
            print(args.prompt, end="", flush=True)
            for chunk in stream:
                print(chunk.text, end="", flush=True)
            print()
        except SpecdecError as e:
            print(f"\nerror: {e}", file=sys.stderr)
            return 1
    s = stream.summary
    print(f"method={s.method} tau={s.tau:.2f} verify_steps={s.verify_steps} "
          f"tokens={s.completion_tokens} finish={s.finish_reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
