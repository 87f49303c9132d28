"""``SiloData`` storage dtypes at the edges (issue #39's battery): ``label_dtype='colour'`` surfaced NumPy's
"data type 'colour' not understood" without the argument's name; a complex or string dtype is refused too."""

import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.engine.silos import PooledSiloData, SiloData

XS, YS = [np.ones((5, 2), np.float32)], [np.zeros(5)]


@pytest.mark.parametrize("kwargs, needle", [
    ({"label_dtype": "colour"}, r"label_dtype='colour' is not a dtype"),
    ({"dtype": "colour"}, r"dtype='colour' is not a dtype"),
    ({"dtype": np.complex64}, r"dtype=.*complex64.* must be a real numeric dtype"),
    ({"label_dtype": str}, r"label_dtype=.*str.* must be a real numeric dtype"),
])
def test_bad_storage_dtypes_are_type_errors_naming_the_argument(kwargs, needle):
    with pytest.raises(TypeError, match=needle):
        SiloData.from_silos(XS, YS, **kwargs)
    with pytest.raises(TypeError, match=needle):
        PooledSiloData.from_indices(XS[0], YS[0], [np.arange(5)], **kwargs)


def test_real_storage_dtypes_are_kept():
    for dtype, label_dtype in ((jnp.float32, jnp.int32), (jnp.bfloat16, None), ("float16", "int8")):
        data = SiloData.from_silos(XS, YS, dtype=dtype, label_dtype=label_dtype)
        assert data.x.dtype == np.dtype(dtype)
        assert data.y.dtype == np.dtype(dtype if label_dtype is None else label_dtype)
