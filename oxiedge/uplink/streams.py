"""How an uplink reaches its upstream: TCP, or TLS verifying the certificate and the host
name with the handshake completed here (so a certificate problem is reported as one), and
the one-line reasons the links give for I/O errors (trio wraps the real cause).

The AMQP link opens with :func:`connect_tcp` + :func:`start_tls` and words errors with
:func:`oneline`; the MQTT link opens with :func:`open_stream` and words them with
:func:`io_reason` (which also names TLS close and certificate problems). Both wordings are
what ``uplink status`` has always shown; only their place is shared.
"""

from __future__ import annotations

import os
import ssl

import trio

from .link import Endpoint, LinkError, LinkOptions, tls_context


# ------------------------------------------------------------------- the AMQP link
async def connect_tcp(endpoint: Endpoint) -> trio.SocketStream:
    try:
        return await trio.open_tcp_stream(endpoint.host, endpoint.port)
    except OSError as exc:
        raise LinkError(f"{endpoint.redacted()}: cannot connect: {oneline(exc)}") from None


async def start_tls(tcp: trio.abc.Stream, endpoint: Endpoint,
                     options: LinkOptions) -> trio.SSLStream[trio.abc.Stream]:
    """TLS over ``tcp`` with certificate and host name verification; the handshake is
    completed here so a certificate error is reported as such. Closes ``tcp`` on failure."""
    where = endpoint.redacted()
    try:
        ctx = tls_context(endpoint, options.ca_file)
    except (OSError, ssl.SSLError) as exc:  # unreadable or invalid CA file
        await trio.aclose_forcefully(tcp)
        raise LinkError(f"{where}: TLS setup: {oneline(exc)}") from None
    tls = trio.SSLStream(tcp, ctx, server_hostname=endpoint.host)
    try:
        await tls.do_handshake()
    except (trio.BrokenResourceError, OSError, ssl.SSLError) as exc:
        await trio.aclose_forcefully(tls)
        raise LinkError(f"{where}: TLS handshake failed: {oneline(exc)}") from None
    except BaseException:  # cancelled (timeout): the caller never sees this stream
        await trio.aclose_forcefully(tls)
        raise
    return tls


def oneline(exc: BaseException) -> str:
    """The most telling one-line text of a socket/TLS error (trio wraps the real cause)."""
    while isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


# ------------------------------------------------------------------- the MQTT link
async def open_stream(endpoint: Endpoint, options: LinkOptions) -> trio.abc.Stream:
    """TCP, or TLS with certificate and host name verification; the TLS handshake is done
    here so its failure is reported as such."""
    if not endpoint.tls:
        return await trio.open_tcp_stream(endpoint.host, endpoint.port)
    try:
        ctx = tls_context(endpoint, options.ca_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise LinkError(f"{endpoint.redacted()}: cannot use CA file {options.ca_file!r}: "
                        f"{io_reason(exc)}") from None
    tls = await trio.open_ssl_over_tcp_stream(endpoint.host, endpoint.port, ssl_context=ctx)
    try:
        await tls.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(tls)
        raise
    return tls


def io_reason(exc: BaseException) -> str:
    """A one-line reason for an I/O error (trio wraps TLS errors in BrokenResourceError;
    a failed connect has one error per address tried as its cause)."""
    cause = exc.__cause__
    if isinstance(exc, trio.BrokenResourceError) and isinstance(cause, BaseException):
        exc = cause
    if isinstance(exc, ssl.SSLEOFError) or (isinstance(exc, ssl.SSLError)
                                            and "EOF" in str(exc.reason)):
        return "connection closed by upstream (without TLS close_notify)"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or exc}"
    if isinstance(exc, OSError):
        group = exc.__cause__
        if isinstance(group, BaseExceptionGroup) and group.exceptions:
            # trio.open_tcp_stream: "all attempts to connect to H:P failed", one error per
            # address as the cause; the first one's errno says why.
            first = group.exceptions[0]
            if isinstance(first, OSError) and first.errno:
                return f"{os.strerror(first.errno).lower()} ({exc})"
            return f"{exc} ({first})"
        if exc.strerror:
            return exc.strerror[0].lower() + exc.strerror[1:]
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def first_link_error(group: BaseExceptionGroup) -> LinkError | None:
    """The first ``LinkError`` anywhere in a (nested) exception group."""
    for exc in group.exceptions:
        if isinstance(exc, LinkError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = first_link_error(exc)
            if found is not None:
                return found
    return None
