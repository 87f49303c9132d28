# Copyright the google/differential-privacy authors (repository licence: Apache-2.0).
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Ported into dpjax from google/differential-privacy, commit 125d46c8cb4253115c545dd4d574a2d5e52ef4bd
# (pull request #414, not in the dp_accounting 0.6 release), file
# python/dp_accounting/dp_accounting/pld/random_allocation/__init__.py.
# Modification: the package's import paths only (dp_accounting.pld.random_allocation -> dpjax.accounting.ra_upstream).
"""Public entry points for random-allocation privacy accounting."""

from dpjax.accounting.ra_upstream.distributions import PLDRealization
from dpjax.accounting.ra_upstream.api import (
    gaussian_allocation_pld,
    general_allocation_pld,
)
from dpjax.accounting.ra_upstream.definitions import (
    DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
    DEFAULT_TAIL_TRUNCATION,
    AllocationSchemeConfig,
    BoundType,
    Direction,
    PrivacyParams,
    SpacingType,
)

__all__ = [
    "PLDRealization",
    "AllocationSchemeConfig",
    "BoundType",
    "DEFAULT_VALUE_DISCRETIZATION_INTERVAL",
    "DEFAULT_TAIL_TRUNCATION",
    "Direction",
    "PrivacyParams",
    "SpacingType",
    "gaussian_allocation_pld",
    "general_allocation_pld",
]
