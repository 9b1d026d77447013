"""A multi-adapter server's parts for the app: the catalog, the residency, `/v1/models` cards, `/health` counts
and `POST /admin/adapters` (docs/serving.md "Many adapters").

`POST /admin/adapters` `{"model": "ID" | "ID@n" | prefix}` (the API key as every `/v1` route; JSON only):
the host (`tt serve`, over `hostlink`) resolves the name among registered models only (never a folder) and
checks its base; the server checks the folder against the pinned manifest digest, then serves it (loaded on
its first request); an adapter config the LoRA bank cannot apply (`lora_bank.read_config`) is 422.
200 `{"model": "ID@n", "manifest_sha256", "status": "added" | "replaced" | "unchanged"}`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tt_stagekit.contract import ServedModel
from tt_stagekit.userinput import JSONInputError, loads
from tt_engine_adapter.serve import lora_bank
from tt_engine_adapter.serve.adapters import Catalog, Entry, ManifestRefused, Residency, check_folder, log
from tt_engine_adapter.serve.guard import is_json, not_json
from tt_engine_adapter.serve.hostlink import HostLink
from tt_engine_adapter.serve.request import ApiError

MAX_NAME = 300


class Many:
    def __init__(self, catalog: Catalog, residency: Residency, link: Optional[HostLink]):
        self.catalog, self.residency, self.link = catalog, residency, link

    def cards(self, created: int) -> list[dict[str, Any]]:
        resident = {e.uid for e in self.residency.resident}
        return [{"id": e.reference, "object": "model", "created": created, "owned_by": "tt", "root": e.spec.name,
                 "version": e.spec.version, "manifest_sha256": e.spec.manifest_sha256,
                 "resident": e.uid in resident} for e in self.catalog.entries()]

    def health(self) -> dict[str, Any]:
        """Counts only: /health needs no key, so it names no model."""
        return {"adapters": {"served": len(self.catalog.entries()), "resident": len(self.residency.resident),
                             "max_resident": self.residency.limit, "loads": self.residency.loads,
                             "evictions": self.residency.evictions}}

    def admit(self, spec: ServedModel) -> tuple[Entry, str]:
        """Serve `spec` (as the host resolved it) after checking its folder against its pinned manifest and its
        config against what the LoRA bank applies; ApiError 422 naming which failed (the log says why)."""
        try:
            check_folder(spec)
        except ManifestRefused as exc:
            log(f"POST /admin/adapters: {exc}")
            raise ApiError(422, f"{spec.name} failed its manifest check and is not loaded (the server log says why)",
                           "model", "manifest_check_failed") from None
        try:
            lora_bank.read_config(spec.path)
        except lora_bank.Refused as exc:
            log(f"POST /admin/adapters: {spec.name} cannot be served here: {exc}")
            raise ApiError(422, f"{spec.name} uses a setting the many-adapter server cannot apply (the server log "
                                "names it); serve it alone with `tt serve ID`", "model", "adapter_unsupported") from None
        return self.catalog.add(spec)

    def admin_route(self, read_body: Callable[[Request], Awaitable[bytes]],
                    body_timeout: float) -> Callable[[Request], Awaitable[Response]]:
        async def admin_adapters(request: Request) -> Response:
            try:
                if not is_json(request.headers.get("content-type")):
                    raise not_json()
                try:
                    raw = await asyncio.wait_for(read_body(request), body_timeout)
                except asyncio.TimeoutError:
                    raise ApiError(408, f"the request body did not arrive within {body_timeout:g} s", None,
                                   "request_timeout") from None
                model = _model_of(raw)
                if self.link is None:
                    raise ApiError(503, "this server was not started by `tt serve`, which resolves registered "
                                        "models; start it with `tt serve ID [ID ...]` to load adapters while it "
                                        "runs", None, "host_unavailable", "server_error")
                spec = await run_in_threadpool(self.link.ask, model)
                entry, how = await run_in_threadpool(self.admit, spec)
            except ApiError as exc:
                return JSONResponse(exc.body(), status_code=exc.status)
            log(f"adapter {entry.reference} {how} (manifest sha256 {entry.spec.manifest_sha256})")
            return JSONResponse({"model": entry.reference, "manifest_sha256": entry.spec.manifest_sha256,
                                 "status": how})

        return admin_adapters


def _model_of(raw: bytes) -> str:
    try:
        body = loads(raw)
    except JSONInputError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc.located()}") from None
    if not isinstance(body, dict) or set(body) != {"model"} or not isinstance(body["model"], str) or \
            not 0 < len(body["model"]) <= MAX_NAME:
        raise ApiError(400, "the body must be {\"model\": \"ID\" | \"ID@n\"} (a registered model id; never a path)",
                       "model")
    return body["model"]
