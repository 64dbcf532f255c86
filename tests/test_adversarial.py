"""Every case of the adversarial corpus (tests/adversarial/), one test each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial import load_areas


def _params() -> list[object]:
    params = []
    for area, (_, cases) in load_areas().items():
        for case in cases:
            marks = [getattr(pytest.mark, m) for m in case.marks]
            params.append(pytest.param(case, id=f"{area}: {case.name}", marks=marks))
    return params


@pytest.mark.parametrize("case", _params())
def test_attack_is_contained(case: object, tmp_path: Path) -> None:
    case.check(tmp_path)  # type: ignore[attr-defined]
