"""The storage quotas per assay as settings (`ASSAYGATE_QUOTA_*`, docs/operations.md, "Storage
quotas"): a part of `service.settings.Settings`, kept here so that file stays readable."""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.core.evidence.quota import Quota

_DEFAULT = Quota()


class QuotaSettings(BaseModel):
    """What one assay may store, cut before it is written (`service.core.evidence.quota`)."""

    # The merged report (every fault's counts and samples) and the signed dossier, in bytes.
    quota_report_bytes: int = Field(default=_DEFAULT.report_bytes, ge=64 * 1024)
    quota_dossier_bytes: int = Field(default=_DEFAULT.dossier_bytes, ge=64 * 1024)
    # Every fault's sampled trials together (each fault an equal share), in bytes.
    quota_samples_bytes: int = Field(default=_DEFAULT.samples_bytes, ge=16 * 1024)
    # The longest string a sampled trial keeps (a claim, a tool argument, a reply), in characters.
    quota_string_chars: int = Field(default=_DEFAULT.string_chars, ge=64)

    def quota(self) -> Quota:
        return Quota(
            report_bytes=self.quota_report_bytes,
            samples_bytes=self.quota_samples_bytes,
            dossier_bytes=self.quota_dossier_bytes,
            string_chars=self.quota_string_chars,
        )
