"""Parts that several method families use: the mixing network and its taps, the training loop, the attacks on a
mixture's weight and on a learned gate, the files a trained network is kept in, and the checks of card fields.

A method family imports these from here, never from a sibling family."""
