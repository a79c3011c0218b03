#!/bin/sh
# Builds genericCC d0153f8's sender and receiver (Pantheon's copa and taova, 2018-2020) the way
# its makefile's rules do, run directly as the 2017 script does (makepp on Debian 12 falls back to
# its own rules); without -Werror, which Debian 12's g++ trips on warnings the 2018 compiler
# did not give. A checkout of d0153f8 in $PANTHEON_2018_SRC/genericCC.
set -e
cd "${PANTHEON_2018_SRC:-/work/ref/src-2018}/genericCC"
F="-DHAVE_CONFIG_H -std=c++11 -pthread -fno-default-inline -g -O2 -fPIC -Wno-deprecated-declarations"
I="-I./protobufs-default -I./udt"
protoc --cpp_out=. protobufs-default/dna.proto
g++ -I.. -I. -O2 -fPIC -c protobufs-default/dna.pb.cc -o protobufs-default/dna.pb.o
O="random memory memoryrange rat whisker whiskertree udp-socket traffic-generator remycc markoviancc estimators rtt-window"
for o in $O sender receiver; do
  g++ $I $F -c $o.cc -o $o.o
done
g++ $(for o in $O sender; do printf '%s.o ' $o; done) protobufs-default/dna.pb.o -o sender -ljemalloc -lm -pthread -lprotobuf -lpthread
g++ receiver.o udp-socket.o -o receiver -ljemalloc -lm -pthread -lprotobuf -lpthread
