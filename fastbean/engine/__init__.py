"""The compiled queue engine (core.pyx, stitched from the .pxi files here;
read core.pxd first) and the protocol parser (parser.pyx)."""
