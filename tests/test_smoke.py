"""The package imports and its data loads: the minimum a fresh clone must do."""
import inferlab


def test_every_named_model_and_accelerator_loads():
    assert inferlab.list_models() and inferlab.list_accelerators()
    for name in inferlab.list_models():
        assert inferlab.get_model(name).n_params > 0
    for name in inferlab.list_accelerators():
        assert inferlab.get_accelerator(name).peak("bf16") > 0
