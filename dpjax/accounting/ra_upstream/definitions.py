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
# python/dp_accounting/dp_accounting/pld/random_allocation/definitions.py.
# Modification: the package's import paths only (dp_accounting.pld.random_allocation -> dpjax.accounting.ra_upstream).
"""Core type definitions and low-level PMF validation for random-allocation."""

from __future__ import annotations

import dataclasses
import enum

import numpy as np


# =============================================================================
# Discrete Distribution Types
# =============================================================================


class BoundType(enum.Enum):
  """Tie-breaking bound_type for discretization."""

  DOMINATES = "DOMINATES"
  IS_DOMINATED = "IS_DOMINATED"


class SpacingType(enum.Enum):
  """Grid spacing_type strategy."""

  LINEAR = "linear"
  GEOMETRIC = "geometric"


@dataclasses.dataclass(frozen=True)
class RegularGrid:
  """Regular grid metadata with exact spacing semantics."""

  x_min: float
  step: float
  size: int
  spacing_type: SpacingType

  @property
  def x_array(self) -> np.ndarray:
    """Array of grid coordinates."""
    indices = np.arange(self.size, dtype=np.float64)
    if self.spacing_type == SpacingType.LINEAR:
      return self.x_min + self.step * indices
    if self.spacing_type == SpacingType.GEOMETRIC:
      return self.x_min * np.exp(self.step * indices)
    raise ValueError(f"Unknown SpacingType: {self.spacing_type}")


class Direction(enum.Enum):
  """Enum for direction of privacy analysis."""

  ADD = "add"
  REMOVE = "remove"


# Defaults for AllocationSchemeConfig (independent of REALIZATION_MOMENT_TOL;
# tail budget is a modeling choice).
DEFAULT_VALUE_DISCRETIZATION_INTERVAL = 1e-4
DEFAULT_TAIL_TRUNCATION = 1e-12


@dataclasses.dataclass
class PrivacyParams:
  """Parameters common to all privacy schemes."""

  sigma: float
  num_steps: int
  num_selected: int = 1
  num_epochs: int = 1
  epsilon: float | None = None
  delta: float | None = None


@dataclasses.dataclass
class AllocationSchemeConfig:
  """Configuration for privacy schemes."""

  value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL
  tail_truncation: float = DEFAULT_TAIL_TRUNCATION
  max_grid_mult: int = -1  # -1 means no upper limit on grid size


# =============================================================================
# Discrete PMF validation
# =============================================================================


def validate_discrete_pmf_and_boundaries(
    prob_arr: np.ndarray,
    p_min: float,
    p_max: float,
) -> None:
  """Validate 1-D nonnegative PMF and nonnegative boundary masses.

  Args:
      prob_arr: Finite-support probability masses.
      p_min: Lower boundary mass (e.g. mass at ``-∞`` or 0).
      p_max: Upper boundary mass (e.g. mass at ``+∞``).

  Raises:
      ValueError: If shape or nonnegativity checks fail.

  """
  prob_arr = np.asarray(prob_arr, dtype=np.float64)
  if prob_arr.ndim != 1:
    raise ValueError("PMF must be 1-D array")
  if np.any(prob_arr < 0.0):
    raise ValueError("PMF must be nonnegative")
  if p_min < 0.0:
    raise ValueError(f"min must be nonnegative, got {p_min:.2e}")
  if p_max < 0.0:
    raise ValueError(f"max must be nonnegative, got {p_max:.2e}")
