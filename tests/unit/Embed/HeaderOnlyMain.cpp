// Runs the probe of HeaderOnlyTU.cpp (CPython not initialized: an error).
int headerOnlyProbe();
int main() { return headerOnlyProbe(); }
