"""Ed25519 signatures of firmware bundles and of the kernel versions a server sends.

A bundle's manifest holds the SHA-256 of every file, so one signature over the manifest covers
the whole bundle (octune.firmware.bundle names the two files). The checksums alone catch
accidents (a truncated copy); only a signature stops someone who edits a table and recomputes
them. Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public), as `openssl genpkey
-algorithm ed25519` writes them too; where a file is inconvenient (a CI secret), the option or
its environment variable may hold the PEM text itself.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from octune.core.errors import OctuneError

_PEM = "-----BEGIN"


class SignatureError(OctuneError):
    """A key that cannot be used, or a bundle whose signature does not verify."""


def create_key(path: Path) -> Path:
    """Write a new private key to `path` (readable by its owner only) and its public key
    beside it as `<path>.pub`; the public key's path.
    """
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    public_path = path.with_name(f"{path.name}.pub")
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SignatureError(
            f"{path} exists: choose another path, keys are never overwritten"
        ) from None
    except OSError as error:
        raise SignatureError(f"cannot write {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(private)
    public_path.write_bytes(public)
    return public_path


def sign_manifest(manifest: Path, signature: Path, key: str) -> None:
    """Write to ``signature`` the private ``key``'s signature of the bundle's ``manifest``."""
    signed = private_key(key).sign(manifest.read_bytes())
    signature.write_text(base64.b64encode(signed).decode() + "\n")


def verify_manifest(manifest: Path, signature: Path, key: str, bundle: Path) -> None:
    """Refuse ``bundle`` unless ``signature`` is the public ``key``'s over its ``manifest``."""
    try:
        signed = signature.read_text()
    except FileNotFoundError:
        raise SignatureError(
            f"bundle {bundle} is not signed, and a public key was given: export it with --sign-key"
        ) from None
    if not _verifies(public_key(key), signed, manifest.read_bytes()):
        raise SignatureError(
            f"bundle {bundle}: the signature does not match its manifest under this key: the "
            "bundle was changed after signing, or signed with another key; do not use it"
        )


def kernel_statement(sha256: str) -> bytes:
    """What a server signs to vouch for a kernel version: its hash covers both texts."""
    return f"octune kernel version {sha256}".encode()


def sign_kernel(sha256: str, key: Ed25519PrivateKey) -> str:
    return base64.b64encode(key.sign(kernel_statement(sha256))).decode()


def verify_kernel(sha256: str, signature: str | None, key: str, where: str) -> None:
    """Refuse kernel version `sha256` from `where` unless `signature` is the key's over it."""
    if not signature:
        raise SignatureError(
            f"{where} sent kernel version {sha256[:12]} unsigned, and a public key was given: "
            "start the server with --sign-key"
        )
    if not _verifies(public_key(key), signature, kernel_statement(sha256)):
        raise SignatureError(
            f"{where} sent kernel version {sha256[:12]} with a signature this key does not "
            "verify: it was signed with another key, or changed on the way; do not compile it"
        )


def private_key(key: str) -> Ed25519PrivateKey:
    """The unencrypted Ed25519 private key `key` (a PEM file's path, or PEM)."""
    try:
        private = serialization.load_pem_private_key(_pem(key, "signing key"), password=None)
    except (ValueError, TypeError):  # not PEM, or protected by a passphrase
        private = None
    if not isinstance(private, Ed25519PrivateKey):
        raise SignatureError(
            "the signing key is not an unencrypted Ed25519 private key: create one with "
            "`octune keygen`"
        )
    return private


def public_key(key: str) -> Ed25519PublicKey:
    try:
        public = serialization.load_pem_public_key(_pem(key, "public key"))
    except ValueError:
        raise SignatureError("the public key is not a PEM public key: pass the .pub file") from None
    if not isinstance(public, Ed25519PublicKey):
        raise SignatureError("the public key is not an Ed25519 key: pass the key's .pub file")
    return public


def _verifies(key: Ed25519PublicKey, signature: str, message: bytes) -> bool:
    try:
        key.verify(base64.b64decode(signature.strip(), validate=True), message)
    except (InvalidSignature, ValueError):
        return False
    return True


def _pem(key: str, what: str) -> bytes:
    """PEM text as given, or read from the file it names."""
    if key.lstrip().startswith(_PEM):
        return key.encode()
    try:
        return Path(key).expanduser().read_bytes()
    except OSError as error:
        raise SignatureError(f"cannot read the {what} {key}: {error.strerror}") from None
