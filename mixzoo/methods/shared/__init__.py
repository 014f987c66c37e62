"""Parts that several method families use: the mixing network and its taps, the training loop, the attacks on a
mixture's weight and on a learned gate and the files a trained network is kept in.

A method family imports these from here, never from a sibling family."""
