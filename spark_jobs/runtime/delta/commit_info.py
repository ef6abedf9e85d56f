"""What a sigflow commit says about itself, in the commit's ``userMetadata``: one typed
record, written and parsed here only.

``{"sigflow": {"job": ..., "checkpoint_id": ..., "app_id": ..., "batch_id": ..., "watermark_ms":
..., "kafka_end_offsets": {topic: {partition: offset}}}}``. A batch's table commits carry all of
it (the replay check reads app id and batch id, ``sigflow checkpoint recover`` the offsets,
lineage the job); pipeline_metrics commits carry the job alone. A commit whose metadata is
not this record (another writer's, or a malformed value) is not a sigflow commit.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

METADATA_KEY = "sigflow"


class CommitInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    job: str
    checkpoint_id: str | None = None
    app_id: str | None = None
    batch_id: int | None = Field(default=None, ge=0)
    watermark_ms: int | None = Field(default=None, ge=0)
    kafka_end_offsets: dict[str, dict[str, int]] = Field(default_factory=dict)

    def user_metadata(self) -> str:
        """The commit's ``userMetadata``; the same record always gives the same text (the
        replay check finds a commit by it)."""
        return json.dumps({METADATA_KEY: self.model_dump(exclude_none=True, exclude_defaults=True)})

    @classmethod
    def parse(cls, raw: Any) -> CommitInfo | None:
        """The record in a commit's metadata (its JSON text, or the object delta-rs gives),
        or None when there is none or it is malformed."""
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return None
        fields = parsed.get(METADATA_KEY, parsed) if isinstance(parsed, dict) else None
        if not isinstance(fields, dict):
            return None
        try:
            return cls.model_validate(fields)
        except ValidationError:
            return None
