"""Filesystem profiles: built-ins, replace(), validation, and the TOML round trip."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs import Profile, profiles

# The documented valid domain of every parameter (written out here, not read from simfs).
ENUMS = {
    "lookupcache": ("all", "positive", "none"),
    "write_back": ("through", "close", "locked"),
    "upload": ("extents", "whole"),
    "create_visible": ("open", "close"),
    "data_durable": ("fsync", "close", "replayed"),
    "entry_durable": ("dir_fsync", "op"),
    "rename": ("atomic", "copy_delete"),
    "exclusive_create": ("atomic", "racy"),
    "flock": ("cluster", "node", "none"),
    "unlink_open": ("posix", "estale"),
    "crash_order": ("prefix", "omit_one"),
    "persistence": ("posix", "ext4", "xfs"),
    "change_detection": ("change_attr", "timestamps"),
    "dir_mtime": ("real", "fixed"),
}
BOOLS = ("lookup_tied_to_parent", "eexist_drops_entry", "cto", "dir_rename", "silly_rename", "on_node")
TTL_PAIRS = (("acregmin", "acregmax"), ("acdirmin", "acdirmax"))
NUMBERS = ("positive_ttl", "negative_ttl", "mtime_granularity", "capacity", "rpc_latency", "local_latency",
           "dirty_expire", "dirty_writeback", "dirty_background_bytes")
BOUNDED = {"mtime_granularity": 3600.0, "rpc_latency": 3600.0, "local_latency": 3600.0}  # seconds, at most
STRINGS = ("name", "notes")

non_negative = st.one_of(st.floats(min_value=0.0, allow_nan=False), st.integers(0, 10**6))
positive = st.one_of(st.floats(min_value=0.0, exclude_min=True, allow_nan=False), st.integers(1, 10**6))


@st.composite
def valid_params(draw, text=st.text()):
    params = {}
    for lo, hi in TTL_PAIRS:
        a, b = draw(non_negative), draw(non_negative)
        params[lo], params[hi] = min(a, b), max(a, b)
    for key, choices in ENUMS.items():
        params[key] = draw(st.sampled_from(choices))
    for key in BOOLS:
        params[key] = draw(st.booleans())
    for key in NUMBERS:
        params[key] = draw(st.floats(0.0, BOUNDED[key]) if key in BOUNDED else non_negative)
    params["torn_sector"] = draw(st.integers(0, 2**63 - 1))
    params["bandwidth"] = draw(st.one_of(st.floats(1.0, 1e15), st.integers(1, 10**15)))
    params["jitter"] = draw(st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
    for key in STRINGS:
        params[key] = draw(text)
    return params


def valid_sources(params: dict):
    """Sources for some of the parameters (any text)."""
    return st.dictionaries(st.sampled_from(sorted(params)), st.text(), max_size=5)


@settings(max_examples=1)
@given(valid_params())
def test_strategy_covers_every_parameter(params):
    """If Profile grows a parameter, the round-trip property must learn its domain (sources are
    not a parameter: they say where each value comes from)."""
    assert set(params) == {f.name for f in dataclasses.fields(Profile)} - {"sources"}


# -- built-in profiles -----------------------------------------------------------------------------

BUILTINS = ["local", "nfs", "beegfs", "lustre", "objectstore", "local-posix"]


def test_names():
    assert profiles.names() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_get_returns_profiles_named_after_themselves(name):
    profile = profiles.get(name)
    assert isinstance(profile, Profile)
    assert profile.name == name
    assert profiles.get(profile) is profile  # a Profile passes through
    assert profile.notes  # built-ins say what they model


def test_nfs_parameters_follow_nfs5_and_the_kernel():
    nfs = profiles.get("nfs")
    assert (nfs.acregmin, nfs.acregmax, nfs.acdirmin, nfs.acdirmax) == (3, 60, 30, 60)  # nfs_fs.h NFS_DEF_*
    assert nfs.lookupcache == "all"
    assert nfs.flock == "cluster"
    assert nfs.cto is True
    assert nfs.eexist_drops_entry is True  # fs/nfs/dir.c: d_drop on any failed create
    assert nfs.mtime_granularity == 0.004  # one jiffy at CONFIG_HZ=250
    assert nfs.change_detection == "change_attr"  # NFSv4.2 is tried first
    assert nfs.write_back == "close" and nfs.capacity == 2**50
    assert not nfs.coherent


def test_beegfs_parameters_follow_config_c():
    beegfs = profiles.get("beegfs")
    assert (beegfs.acregmin, beegfs.acregmax) == (0, 0)  # tuneFileSubentryCacheValidityMS=0
    assert (beegfs.acdirmin, beegfs.acdirmax) == (1, 1)  # tuneDirSubentryCacheValidityMS=1000
    assert beegfs.write_back == "close"  # tuneFileCacheType=buffered, flushed at close
    assert beegfs.data_durable == "fsync"  # tuneRemoteFSync=true
    assert beegfs.flock == "node"  # tuneUseGlobalFileLocks=false
    assert beegfs.eexist_drops_entry is False and beegfs.negative_ttl == 1.0  # the prime-rl trap, <= 1 s
    assert beegfs.mtime_granularity == 1.0
    assert "tuneENOENTCacheValidityMS" in beegfs.notes and "inferred" in beegfs.notes
    assert not beegfs.coherent


def test_lustre_parameters():
    lustre = profiles.get("lustre")
    assert lustre.flock == "cluster"  # mount.lustre(8): flock is the default since 2.12.3
    assert "localflock" in lustre.sources["flock"]
    assert lustre.coherent
    assert lustre.eexist_drops_entry is True


def test_lustre_stale_negative_is_a_documented_variant_not_the_default():
    stale = profiles.get("lustre").replace(**profiles.LUSTRE_STALE_NEGATIVE)
    assert not stale.coherent and stale.eexist_drops_entry is False
    assert stale.lookupcache == "all" and stale.negative_ttl == 30.0
    assert "not found verbatim" in stale.sources["lookupcache"]
    assert "LU-14949" in stale.notes and "#4865" in stale.notes
    for key in profiles.LUSTRE_STALE_NEGATIVE:
        if key not in ("notes", "sources"):
            assert key in stale.sources, key
    assert profiles.get("lustre").lookupcache == "none"


def test_objectstore_parameters_follow_gcsfuse():
    obj = profiles.get("objectstore")
    assert obj.flock == "node"  # FUSE without FUSE_FLOCK_LOCKS: the kernel locks locally
    assert obj.rename == "copy_delete"
    assert obj.dir_rename is False  # rename-dir-limit=0
    assert (obj.acregmax, obj.positive_ttl, obj.negative_ttl) == (60, 60, 5)  # ttl-secs, negative-ttl-secs
    assert obj.dir_mtime == "fixed"
    assert obj.capacity == math.inf
    assert not obj.coherent


def test_capacity_defaults_are_named_as_undocumented():
    assert profiles.get("local").capacity == 2**40
    for name in BUILTINS:
        source = profiles.get(name).sources.get("capacity", "")
        assert name == "objectstore" or "no documented default" in source, name


@pytest.mark.parametrize("name", BUILTINS)
def test_every_value_that_differs_from_the_default_names_its_source(name):
    profile, default = profiles.get(name), Profile()
    differs = {k for k in profiles.param_names()
               if k not in ("name", "notes") and getattr(profile, k) != getattr(default, k)}
    assert differs
    missing = sorted(differs - set(profile.sources))
    assert not missing, f"{name}: no source for {missing}"
    assert all(text.strip() for text in profile.sources.values())


def test_every_parameter_says_what_it_models():
    for name in [*profiles.param_names(), "sources"]:
        assert len(profiles.describe(name)) > 10, name
    with pytest.raises(ValueError, match="nope"):
        profiles.describe("nope")


def test_sources_name_known_parameters_and_are_text():
    with pytest.raises(ValueError, match="acregmn"):
        Profile(sources={"acregmn": "typo"})
    with pytest.raises(TypeError, match="acregmin"):
        Profile(sources={"acregmin": 3})
    with pytest.raises(TypeError, match="sources"):
        Profile(sources=["acregmin"])
    profile = Profile(sources={"acregmin": "mine"})
    assert profile.source("acregmin") == "mine" and profile.source("acregmax") is None
    with pytest.raises(TypeError):
        profile.sources["acregmin"] = "changed"  # type: ignore[index]


@pytest.mark.parametrize("name", BUILTINS)
def test_profiles_pickle_and_deepcopy_with_their_sources(name):
    profile = profiles.get(name).replace(acregmin=0.0)
    for twin in (pickle.loads(pickle.dumps(profile)), copy.deepcopy(profile)):
        assert twin == profile and twin.notes == profile.notes
        assert dict(twin.sources) == dict(profile.sources)


def test_replace_drops_the_source_of_a_changed_value_unless_given():
    nfs = profiles.get("nfs")
    variant = nfs.replace(acdirmin=5.0, acregmin=3.0)
    assert "acdirmin" not in variant.sources  # 5 s is the caller's, not nfs(5)'s
    assert variant.sources["acregmin"] == nfs.sources["acregmin"]  # unchanged value keeps its source
    assert variant.sources["acdirmax"] == nfs.sources["acdirmax"]
    mine = nfs.replace(acdirmin=5.0, sources={"acdirmin": "site measurement"})
    assert mine.sources["acdirmin"] == "site measurement"
    assert mine.sources["acdirmax"] == nfs.sources["acdirmax"]
    assert mine == variant  # sources do not take part in equality


def test_local_is_coherent_with_cluster_flock():
    local = profiles.get("local")
    assert local.coherent
    assert local.flock == "cluster"
    assert local.rename == "atomic"


def test_builtins_are_immutable():
    nfs = profiles.get("nfs")
    with pytest.raises(dataclasses.FrozenInstanceError):
        nfs.acregmin = 0.0  # type: ignore[misc]
    assert profiles.get("nfs").acregmin == 3


@pytest.mark.parametrize("bad", ["nope", "NFS", "", None, 3])
def test_get_unknown_lists_known_names(bad):
    with pytest.raises(ValueError) as info:
        profiles.get(bad)
    message = str(info.value)
    for name in BUILTINS:
        assert name in message


# -- replace -----------------------------------------------------------------------------------------

def test_replace_returns_a_modified_copy():
    nfs = profiles.get("nfs")
    variant = nfs.replace(acdirmin=5, flock="node")
    assert variant is not nfs
    assert (variant.acdirmin, variant.flock) == (5, "node")
    assert (nfs.acdirmin, nfs.flock) == (30, "cluster")
    unchanged = {k: v for k, v in nfs.to_dict().items() if k not in ("acdirmin", "flock")}
    assert {k: v for k, v in variant.to_dict().items() if k in unchanged} == unchanged
    assert variant != nfs
    assert nfs.replace() == nfs


def test_replace_unknown_names_raise_type_error_naming_them():
    with pytest.raises(TypeError) as info:
        profiles.get("nfs").replace(acdirmn=5, flok="node", acregmin=1)
    message = str(info.value)
    assert "acdirmn" in message and "flok" in message


def test_replace_validates():
    with pytest.raises(ValueError, match="acregmin"):
        profiles.get("nfs").replace(acregmin=100)  # above acregmax=60
    with pytest.raises(ValueError, match="cluster"):
        profiles.get("nfs").replace(flock="global")


@given(valid_params())
def test_replace_with_valid_params_gives_exactly_those_params(params):
    variant = profiles.get("objectstore").replace(**params)
    assert variant.to_dict() == params


# -- validation --------------------------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi", TTL_PAIRS)
def test_min_above_max_is_refused(lo, hi):
    with pytest.raises(ValueError) as info:
        Profile(**{lo: 10.0, hi: 5.0})
    assert lo in str(info.value) and hi in str(info.value)


@pytest.mark.parametrize("key", sorted(ENUMS))
def test_bad_enum_value_names_the_allowed_set(key):
    with pytest.raises(ValueError) as info:
        Profile(**{key: "bogus-value"})
    message = str(info.value)
    assert key in message and "bogus-value" in message
    for allowed in ENUMS[key]:
        assert repr(allowed) in message or allowed in message


@pytest.mark.parametrize("key", [*NUMBERS, "acregmin", "acdirmax", "bandwidth", "torn_sector"])
def test_negative_numbers_are_refused(key):
    with pytest.raises((ValueError, TypeError), match=key):
        Profile(**{key: -1})


@pytest.mark.parametrize("key", [*NUMBERS, "acregmax", "jitter", "bandwidth", "torn_sector"])
@pytest.mark.parametrize("value", [True, False, "1", None, [1]])
def test_numbers_refuse_other_types_including_bool(key, value):
    with pytest.raises((TypeError, ValueError), match=key):
        Profile(**{key: value})


@pytest.mark.parametrize("key", BOOLS)
@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_bools_refuse_numbers_and_strings(key, value):
    with pytest.raises((TypeError, ValueError), match=key):
        Profile(**{key: value})


@pytest.mark.parametrize("value", [4096.0, 1.5])
def test_torn_sector_is_an_integer(value):
    with pytest.raises((TypeError, ValueError), match="torn_sector"):
        Profile(torn_sector=value)


@pytest.mark.parametrize("key", ["acregmin", "positive_ttl", "rpc_latency"])
def test_nan_is_refused(key):
    with pytest.raises((TypeError, ValueError), match=key):
        Profile(**{key: math.nan})


@pytest.mark.parametrize("kwargs", [{"bandwidth": 0.0}, {"bandwidth": 1e-300}, {"bandwidth": 1e16},
                                    {"jitter": 1.0}, {"jitter": 1.5}, {"rpc_latency": 1e300},
                                    {"local_latency": 3601.0}, {"mtime_granularity": math.inf}])
def test_out_of_range(kwargs):
    (key,) = kwargs
    with pytest.raises(ValueError, match=key):
        Profile(**kwargs)


@pytest.mark.parametrize("key", STRINGS)
def test_strings_refuse_other_types(key):
    with pytest.raises((TypeError, ValueError), match=key):
        Profile(**{key: 3})


@given(valid_params(), st.data())
def test_any_single_negative_number_is_refused(params, data):
    key = data.draw(st.sampled_from([*NUMBERS, "acregmin", "acregmax", "acdirmin", "acdirmax", "bandwidth"]))
    params[key] = data.draw(st.floats(max_value=0.0, exclude_max=True) | st.integers(max_value=-1))
    with pytest.raises((ValueError, TypeError), match=key):
        Profile(**params)


@given(valid_params())
def test_valid_params_are_accepted(params):
    profile = Profile(**params)
    assert profile.to_dict() == params


def test_inf_ttls_are_valid():
    profile = Profile(acregmin=math.inf, acregmax=math.inf, acdirmin=0.0, acdirmax=math.inf)
    assert profile.acregmax == math.inf
    assert not profile.coherent


# -- TOML ----------------------------------------------------------------------------------------------

@settings(max_examples=100)
@given(valid_params(), st.data())
def test_save_load_round_trip(tmp_path_factory, params, data):
    path = tmp_path_factory.mktemp("prof") / "p.toml"
    profile = Profile(**params, sources=data.draw(valid_sources(params)))
    profile.save(path)
    loaded = Profile.load(path)
    assert loaded == profile
    assert loaded.to_dict() == profile.to_dict()  # notes too, which == ignores
    assert dict(loaded.sources) == dict(profile.sources)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtins_round_trip(tmp_path, name):
    path = tmp_path / f"{name}.toml"
    profiles.get(name).save(path)
    loaded = Profile.load(path)
    assert loaded == profiles.get(name)
    assert loaded.notes == profiles.get(name).notes
    assert dict(loaded.sources) == dict(profiles.get(name).sources)


@pytest.mark.parametrize("text", ["tab\there", "cr\rlf\n", "bell\x07", "del\x7f", 'quote" back\\slash', "nul\x00"])
def test_strings_with_control_characters_round_trip(tmp_path, text):
    profile = Profile(name=text, notes=text)
    profile.save(tmp_path / "p.toml")
    loaded = Profile.load(tmp_path / "p.toml")
    assert (loaded.name, loaded.notes) == (text, text)


def test_load_accepts_a_profile_table(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text('[profile]\nname = "site"\nacregmin = 1\nacregmax = 2.5\nflock = "node"\nnegative_ttl = inf\n')
    loaded = Profile.load(path)
    assert loaded == Profile(name="site", acregmin=1.0, acregmax=2.5, flock="node", negative_ttl=math.inf)
    assert isinstance(loaded.acregmin, float)


def test_load_fills_missing_parameters_with_defaults(tmp_path):
    path = tmp_path / "partial.toml"
    path.write_text("cto = false\n")
    assert Profile.load(path) == Profile(cto=False)


def test_load_accepts_str_and_pathlike(tmp_path):
    path = tmp_path / "p.toml"
    profiles.get("lustre").save(str(path))
    assert Profile.load(str(path)) == Profile.load(Path(path)) == profiles.get("lustre")


def _load_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad-profile.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        Profile.load(path)
    message = str(info.value)
    assert str(path) in message
    return message


@pytest.mark.parametrize("text", ["acregmin = ", "acregmin = 1\nacregmin = 2\n", "[profile\n", "flock = node\n"])
def test_load_invalid_toml(tmp_path, text):
    _load_error(tmp_path, text)


def test_load_unknown_key(tmp_path):
    message = _load_error(tmp_path, "acregmin = 1.0\nacregmn = 3.0\n")
    assert "acregmn" in message


def test_load_unknown_key_inside_profile_table(tmp_path):
    message = _load_error(tmp_path, "[profile]\nflok = \"node\"\n")
    assert "flok" in message


@pytest.mark.parametrize("key, value", [
    ("acregmin", '"fast"'), ("acdirmax", "true"), ("cto", "1"), ("torn_sector", "4096.5"),
    ("flock", '"global"'), ("lookupcache", "3"), ("name", "7"), ("rpc_latency", "-1.0"), ("jitter", "2.0"),
    ("positive_ttl", "[1, 2]"), ("negative_ttl", "nan"),
])
def test_load_wrong_type_or_value_names_the_key(tmp_path, key, value):
    message = _load_error(tmp_path, f"{key} = {value}\n")
    assert key in message


def test_load_min_above_max_names_the_keys(tmp_path):
    message = _load_error(tmp_path, "acdirmin = 9.0\nacdirmax = 1.0\n")
    assert "acdirmin" in message and "acdirmax" in message


def test_load_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        Profile.load(tmp_path / "absent.toml")


def test_profile_file_works_in_a_cluster(tmp_path):
    path = tmp_path / "site.toml"
    profiles.get("nfs").replace(acdirmin=0.0, acdirmax=0.0, acregmin=0.0, acregmax=0.0, lookupcache="none").save(path)
    profile = Profile.load(path)
    assert profile.coherent
    result = simfs.Cluster(nodes=2, ranks_per_node=1, profile=profile).run(_listing_job)
    assert result.ok, result.summary()
    assert result.returns == {0: ["n0", "n1"], 1: ["n0", "n1"]}


def _listing_job():
    import os

    import torch.distributed as dist

    with open(f"/shared/n{dist.get_rank()}", "w"):
        pass
    dist.barrier()
    return sorted(os.listdir("/shared"))
