#!/bin/sh
# Builds genericCC 5101b0a's sender and receiver the way its makefile's rules do
# (makepp 2.0.98 on Debian 12 falls back to its built-in infer_objects rule and pulls in
# the unbuildable cubiccc.cc, so the makefile's commands are run directly).
set -e
cd "${PANTHEON_2017_SRC:-/work/ref/src}/genericCC"
F="-DHAVE_CONFIG_H -std=c++11 -pthread -fno-default-inline -g -O2 -Wno-deprecated-declarations"
I="-I./protobufs-default -I./udt"
protoc --cpp_out=. protobufs-default/dna.proto
g++ -I.. -I. -O2 -c protobufs-default/dna.pb.cc -o protobufs-default/dna.pb.o
for o in random memory memoryrange rat whisker whiskertree udp-socket traffic-generator remycc markoviancc utilities sender receiver; do
  g++ $I $F -c $o.cc -o $o.o
done
g++ random.o memory.o memoryrange.o rat.o whisker.o whiskertree.o udp-socket.o traffic-generator.o remycc.o markoviancc.o utilities.o sender.o protobufs-default/dna.pb.o -o sender -ljemalloc -lm -pthread -lprotobuf -lpthread
g++ receiver.o udp-socket.o -o receiver -ljemalloc -lm -pthread -lprotobuf -lpthread
