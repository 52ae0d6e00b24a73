"""Fail any connection beyond loopback: tests never reach the internet or the LAN."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

_original_connect = socket.socket.connect
_original_connect_ex = socket.socket.connect_ex


class NetworkGuardError(OSError):
    """A test tried to open a connection that does not stay on this machine."""


def allowed(address: Any) -> bool:
    """Unix sockets and loopback addresses only."""
    if isinstance(address, (str, bytes)):
        return True
    host = str(address[0]).split("%", 1)[0]
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _connect(self: socket.socket, address: Any) -> None:
    if not allowed(address):
        raise NetworkGuardError(f"test tried to connect to {address!r}, beyond loopback")
    _original_connect(self, address)


def _connect_ex(self: socket.socket, address: Any) -> int:
    if not allowed(address):
        raise NetworkGuardError(f"test tried to connect to {address!r}, beyond loopback")
    return _original_connect_ex(self, address)


def install() -> None:
    """Guard every socket of this process."""
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]


def uninstall() -> None:
    """Put the original methods back."""
    socket.socket.connect = _original_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _original_connect_ex  # type: ignore[method-assign]
