"""Verifies APNs provider tokens made by the Swift code with PyJWT, an implementation we did not write.

Usage: python3 verify_jwts.py <public-key.pem> <tokens.txt> <kid> <iss>
tokens.txt holds one JWT per line. For each token: PyJWT must verify the ES256 signature; the header
must be exactly {"alg":"ES256","kid":<kid>}; the claims exactly {"iss":<iss>,"iat":<int>}; the
signature must decode to 64 bytes. Prints "verified N" and exits 0, or prints the failures and exits 1.
"""
import base64
import json
import sys

import jwt


def b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def main() -> int:
    pem_path, tokens_path, kid, iss = sys.argv[1:5]
    public_key = open(pem_path, "rb").read()
    failures = []
    count = 0
    for line in open(tokens_path):
        token = line.strip()
        if not token:
            continue
        count += 1
        try:
            claims = jwt.decode(token, public_key, algorithms=["ES256"], options={"verify_iat": False})
            header = jwt.get_unverified_header(token)
            if header != {"alg": "ES256", "kid": kid}:
                failures.append(f"header {header}")
            if set(claims) != {"iss", "iat"} or claims["iss"] != iss:
                failures.append(f"claims {claims}")
            if type(claims["iat"]) is not int:
                failures.append(f"iat {claims['iat']!r} is not an integer")
            signature = b64url(token.split(".")[2])
            if len(signature) != 64:
                failures.append(f"signature is {len(signature)} bytes")
            if "=" in token:
                failures.append("padding in token")
        except Exception as error:  # noqa: BLE001 - report every failure
            failures.append(f"{type(error).__name__}: {error}")
    if failures:
        print(f"{len(failures)} failures of {count}:", *failures[:20], sep="\n")
        return 1
    print(f"verified {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
