"""Dataset layer: NumPy loaders and federated (silo) splits for the five papers' experiments.

No JAX here: every function returns plain NumPy arrays; the engine converts them and pads silos into ``[N, n_max, d]``
arrays with a mask.
"""

from dpjax.data.cifar10 import load_cifar10
from dpjax.data.diff2 import (CAL_HOUSING_FEATURES, DIFF2_DATASETS, GAS_TURBINE_FEATURES, KDD_FEATURES,
                              dealt_diff2_silos, diff2_dataset, diff2_silos, diff2_table, diff2_targets, download_diff2,
                              load_a9a, load_blogfeedback, load_california_housing, load_diff2_raw, load_gas_turbine,
                              load_kddcup99, load_svmlight, load_w8a)
from dpjax.data.federated import FederatedDataset
from dpjax.data.isrl import ISRL_MNIST_PAIRS, OBESITY_STANDARDIZED, insurance_silos, isrl_mnist_silos, obesity_silos
from dpjax.data.mnist import download_mnist, load_mnist, read_idx
from dpjax.data.paths import ENV_VAR, DatasetNotFoundError, data_dir, download, sha256_file
from dpjax.data.sources import REMOTE, UPSTREAM, download_dataset
from dpjax.data.tabular import (INSURANCE_FEATURES, OBESITY_CLASSES, OBESITY_FEATURES, download_insurance,
                                download_obesity, load_insurance, load_obesity)
from dpjax.data.preprocess import (PCA, label_encode, minmax_scale, one_hot, pca_fit, pca_transform, split_sizes,
                                   standardize, standardize_fit)

from dpjax.data import diff2 as _diff2

__all__ = list(_diff2.__all__) + [
    "ENV_VAR", "load_cifar10", "INSURANCE_FEATURES", "ISRL_MNIST_PAIRS", "OBESITY_CLASSES", "OBESITY_FEATURES",
    "OBESITY_STANDARDIZED", "REMOTE", "UPSTREAM", "PCA", "DatasetNotFoundError", "FederatedDataset", "data_dir",
    "download", "download_dataset", "download_insurance", "download_mnist", "download_obesity", "insurance_silos",
    "isrl_mnist_silos", "label_encode", "load_insurance", "load_mnist", "load_obesity", "minmax_scale", "obesity_silos",
    "one_hot", "pca_fit", "pca_transform", "read_idx", "sha256_file", "split_sizes", "standardize", "standardize_fit",
]
