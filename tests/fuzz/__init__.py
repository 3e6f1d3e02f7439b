"""Property tests and fuzz targets for every parser of outside input (issue 7, part 1)."""
