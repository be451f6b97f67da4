"""Makes an ES256 JWT with PyJWT (raw R||S signature), as another provider would.

Usage: python3 make_jwt.py <private-key.p8> <kid> <iss> <iat>  -> prints the token
"""
import sys

import jwt

key_path, kid, iss, iat = sys.argv[1:5]
token = jwt.encode({"iss": iss, "iat": int(iat)}, open(key_path, "rb").read(), algorithm="ES256", headers={"kid": kid})
print(token)
