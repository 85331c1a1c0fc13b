"""`simfs profiles NAME` prints every parameter with where its value comes from, and a profile
saved as TOML keeps its sources."""

from __future__ import annotations

import simfs
from scenarios.cli import main


def _shown(name: str, capsys) -> dict[str, str]:
    """parameter -> its 'source:' line, as `simfs profiles NAME` prints them."""
    assert main(["profiles", name]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown: dict[str, str] = {}
    for line, following in zip(lines, [*lines[1:], ""]):
        if " = " in line and not line.startswith(" "):
            key = line.split(" = ", 1)[0]
            shown[key] = following.strip() if following.startswith("    source:") else ""
    return shown


def test_every_parameter_is_printed_with_its_source(capsys) -> None:
    for name in simfs.profiles.names():
        profile = simfs.profiles.get(name)
        shown = _shown(name, capsys)
        assert set(shown) == set(profile.to_dict()), name
        for key, line in shown.items():
            if key in ("name", "notes"):
                continue
            assert line.startswith("source: "), (name, key, line)
            if key in profile.sources:
                assert profile.sources[key] in line
            else:
                assert "none documented" in line and simfs.profiles.describe(key) in line


def test_the_printed_sources_name_the_documents(capsys) -> None:
    nfs = _shown("nfs", capsys)
    assert "NFS_DEF_ACDIRMIN" in nfs["acdirmin"] and "nfs(5)" in nfs["lookupcache"]
    assert "d_drop" in nfs["eexist_drops_entry"]
    beegfs = _shown("beegfs", capsys)
    assert "tuneDirSubentryCacheValidityMS" in beegfs["acdirmin"]
    assert "tuneUseGlobalFileLocks" in beegfs["flock"]
    assert "mount.lustre(8)" in _shown("lustre", capsys)["flock"]
    obj = _shown("objectstore", capsys)
    assert "negative-ttl-secs" in obj["negative_ttl"] and "rename-dir-limit" in obj["dir_rename"]


def test_saved_profiles_keep_their_sources(tmp_path, capsys) -> None:
    path = tmp_path / "beegfs.toml"
    assert main(["profiles", "beegfs", "--save", str(path)]) == 0
    assert "[sources]" in path.read_text()
    loaded = simfs.Profile.load(path)
    assert loaded == simfs.profiles.get("beegfs")
    assert dict(loaded.sources) == dict(simfs.profiles.get("beegfs").sources)
